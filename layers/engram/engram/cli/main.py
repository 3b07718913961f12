"""`engram` command line: serve, stdio, keys, scopes, schemas, ingest, workspace, audit, oauth, quota, admin."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

from engram.cli.common import cmd_reindex, overrides_of, settings_of
from engram.cli.governance import add_governance
from engram.cli.process import http_options, settle, with_huge_pages
from engram.cli.transfer import add_portability
from engram.kernel.errors import EngramError
from engram.settings import Settings


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from engram.api.app import create_app
    from engram.wiring import build

    overrides = overrides_of(args)
    settings = Settings(**overrides)
    many = f", {settings.workers} processes" if settings.workers > 1 else ""
    print(
        f"Engram on http://{settings.host}:{settings.port}/mcp  (data: {settings.data_dir.resolve()}{many})",
        file=sys.stderr,
    )
    if settings.workers > 1:
        from engram.cli.workers import serve_workers

        return serve_workers(settings, overrides, args.log_level)
    engram = build(settings)
    app = create_app(engram)
    settle()
    # uvloop's event loop when installed (~0.25 ms off every call here); HTTP as `http_options` says
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=args.log_level, **http_options())
    return 0


def cmd_stdio(args: argparse.Namespace) -> int:
    import anyio
    from mcp.server.stdio import stdio_server

    from engram.api.edge import jsonrpc_unicode_error
    from engram.api.mcp import build_server
    from engram.families import select
    from engram.kernel.caller import Principal
    from engram.wiring import build

    settings = settings_of(args)
    engram = build(settings)
    principal = engram.identity.authenticate(settings.api_key)  # fail early, before the client connects

    def principal_of(_ctx: object) -> tuple[Principal, str | None]:
        return principal, settings.context

    server = build_server(engram, select(settings.tool_filter()), principal_of, transport="stdio")

    settle()
    wire_in, wire_out = _claim_stdio()
    stdout = _LineWriter(anyio.wrap_file(wire_out))

    async def checked_lines() -> AsyncIterator[str]:
        """stdin's lines, less those holding a lone surrogate: each is answered here with -32602 naming the
        field (the SDK's parser would drop it unanswered, and the client would wait for ever)."""
        async for line in anyio.wrap_file(wire_in):
            refused = jsonrpc_unicode_error(line)
            if refused is None:
                yield line
            else:
                await stdout.write(refused + "\n")
                await stdout.flush()

    async def main() -> None:
        async with stdio_server(cast(Any, checked_lines()), cast(Any, stdout)) as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
    return 0


def _claim_stdio() -> tuple[Any, Any]:
    """The MCP wire (stdin and stdout, as UTF-8 text) taken for Engram alone: fd 0 then reads the null device
    and fd 1 writes to stderr, so nothing else the process prints can corrupt the protocol."""
    import io
    import os

    wire_in = io.TextIOWrapper(os.fdopen(os.dup(0), "rb"), encoding="utf-8", errors="replace")
    wire_out = io.TextIOWrapper(os.fdopen(os.dup(1), "wb"), encoding="utf-8", line_buffering=False)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return wire_in, wire_out


class _LineWriter:
    """stdout for two writers (the SDK's and the refusals of `checked_lines`): one whole line at a time."""

    def __init__(self, out: Any) -> None:
        import anyio

        self.out, self.lock = out, anyio.Lock()

    async def write(self, text: str) -> None:
        async with self.lock:
            await self.out.write(text)

    async def flush(self) -> None:
        async with self.lock:
            await self.out.flush()


def cmd_keys(args: argparse.Namespace) -> int:
    from engram.wiring import build

    engram = build(settings_of(args).model_copy(update={"embedder": "none"}))
    if args.keys_cmd == "create":
        secret, principal = engram.identity.create_key(args.context, args.principal, args.grant, args.label or "")
        print(
            f"key_id: {principal.key_id}  principal: {principal.role}  contexts: {','.join(principal.contexts)}"
            f"  grant: {','.join(principal.grant)}"
        )
        print("Store this key now; it is not shown again:")
        print(secret)
    elif args.keys_cmd == "list":
        for k in engram.identity.list_keys():  # "principal", the word `keys create` and the seeds use
            print(json.dumps({("principal" if name == "role" else name): v for name, v in k.items()}))
    elif args.keys_cmd == "revoke":
        engram.identity.revoke_key(args.key_id)
        print(f"revoked {args.key_id}")
    return 0


def cmd_scopes(args: argparse.Namespace) -> int:
    from engram.wiring import build

    engram = build(settings_of(args).model_copy(update={"embedder": "none"}))
    if args.scopes_cmd == "create":
        for p in engram.identity.register_scopes(args.context, args.paths):
            print(f"registered {p}")
    else:
        for p in engram.identity.registered(args.context):
            print(p)
    return 0


def cmd_schemas(args: argparse.Namespace) -> int:
    """Register a schema from a JSON file (the body `schemas_create` takes), or list a context's schemas."""
    from pydantic import ValidationError

    from engram.families.records.operations import SchemaIn
    from engram.kernel.caller import check_context
    from engram.wiring import build

    engram = build(settings_of(args).model_copy(update={"embedder": "none"}))
    context = check_context(args.context)
    if args.schemas_cmd == "list":
        for schema in engram.schemas.all(context):
            print(json.dumps(schema.public()))
        return 0
    try:
        spec = SchemaIn.model_validate_json(Path(args.file).read_bytes())
    except (OSError, ValidationError) as exc:
        print(f"error: {args.file}: {exc}", file=sys.stderr)
        return 2
    lookups = [f.model_dump() for f in spec.lookupFields]
    done = engram.schemas.create(
        context, "cli", spec.type, spec.surface, spec.jsonSchema, lookups, spec.indexMode, spec.principalType,
        spec.description,
    )  # fmt: skip
    print(f"registered {done['surface']} schema {done['type']} (version {done['version']}) in {context}")
    return 0


def source_files(root: Path) -> list[Path]:
    """The text files below `root` that git would track: `.gitignore` files honoured (each for its own
    folder and below, as git reads them), `.git` skipped, binary files (a NUL byte in the first 8 KiB) left
    out."""
    import pathspec

    out: list[Path] = []
    specs: list[tuple[Path, pathspec.PathSpec[Any]]] = []

    def ignored(path: Path, is_dir: bool) -> bool:
        for base, spec in specs:
            if base in path.parents:
                rel = path.relative_to(base).as_posix() + ("/" if is_dir else "")
                if spec.match_file(rel):
                    return True
        return False

    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        gi = here / ".gitignore"
        if gi.is_file():
            specs.append((here, pathspec.PathSpec.from_lines("gitignore", gi.read_text(errors="replace").splitlines())))
        dirs[:] = sorted(d for d in dirs if d != ".git" and not ignored(here / d, True))
        for name in sorted(names):
            path = here / name
            if path.is_file() and not path.is_symlink() and not ignored(path, False):
                with path.open("rb") as f:
                    if b"\0" not in f.read(8192):
                        out.append(path)
    return out


def _writer(engram: Any, args: argparse.Namespace, settings: Settings, operation: str) -> Any:
    """The caller a writing command acts as: the key given (`--key`, else ENGRAM_API_KEY), in `--context`
    (else the key's only one), as the local user."""
    principal = engram.identity.authenticate(args.key or settings.api_key)
    context = args.context or settings.context
    return engram.identity.enter(principal, context, frozenset({"agent", "management"}), operation, "stdio")


def cmd_workspace(args: argparse.Namespace) -> int:
    """`engram workspace import PATH`: a source tree into the key's workspace, with a progress bar."""
    from engram.wiring import build

    settings = settings_of(args)
    engram = build(settings)
    caller = _writer(engram, args, settings, "write_code")
    root = Path(args.path).resolve()
    files = source_files(root)
    loaded: list[tuple[str, str]] = []
    skipped = 0
    for f in files:
        try:
            loaded.append(((Path(args.prefix) / f.relative_to(root)).as_posix(), f.read_text()))
        except (UnicodeDecodeError, OSError):
            skipped += 1

    def progress(done: int, total: int) -> None:
        bar = "#" * (30 * done // max(1, total))
        print(f"\r[{bar:<30}] {done}/{total}", end="", file=sys.stderr, flush=True)

    import time

    started = time.perf_counter()
    out = engram.workspace.import_files(caller, loaded, args.reason, args.agent_id, progress)
    seconds = time.perf_counter() - started
    print(file=sys.stderr)
    rate = out["imported"] / max(seconds, 1e-9)
    print(f"imported {out['imported']}, failed {out['failed']}, skipped {skipped} (not UTF-8) "
          f"in {seconds:.1f} s ({rate:.1f} files/s); searchable by keyword now")  # fmt: skip
    print("embedding for semantic search ...", file=sys.stderr, flush=True)
    engram.queue.join()
    print(f"embedded; {time.perf_counter() - started:.1f} s in all")
    for e in out["errors"]:
        print(f"  {e['path']}: {e['error']}")
    return 0 if not out["failed"] else 1


def cmd_ingest(args: argparse.Namespace) -> int:
    """Ingest files and folders with a progress bar; prints ingested / deduplicated / failed."""
    from engram.families.knowledge.documents import NewDocument
    from engram.families.knowledge.parsing import SUPPORTED, detect
    from engram.wiring import build

    settings = settings_of(args)
    engram = build(settings)
    caller = _writer(engram, args, settings, "document_upload")
    files: list[Path] = []
    for raw in args.paths:
        p = Path(raw)
        if p.is_dir():
            files += sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
        elif p.is_file():
            files.append(p)
        else:
            print(f"error: {p}: no such file or folder", file=sys.stderr)
            return 2
    done, dedup, failed = 0, 0, []
    ids: list[str] = []
    for i, f in enumerate(files, 1):
        try:
            data = f.read_bytes()
            mime = detect(data, None, f.name)
            if mime not in SUPPORTED:
                raise EngramError(f"{f}: unsupported type")
            out = engram.documents.ingest(
                caller, NewDocument(data, f.stem, str(f), None, None, f.name, args.collection)
            )
            dedup += out["deduplicated"]
            done += not out["deduplicated"]
            ids.append("" if out["deduplicated"] else out["id"])
        except EngramError as exc:
            failed.append((f, exc.message))
        bar = "#" * (30 * i // len(files))
        print(f"\r[{bar:<30}] {i}/{len(files)} {f.name[:40]:<40}", end="", file=sys.stderr, flush=True)
    ids = [i for i in ids if i]
    while not engram.queue.join(0.5):  # the embeddings run in this process's worker: show how far they are
        ready = sum(engram.documents.get(caller, i)["status"] != "queued" for i in ids)
        print(f"\rembedding {ready}/{len(ids)} documents".ljust(80), end="", file=sys.stderr, flush=True)
    print(f"\rembedding {len(ids)}/{len(ids)} documents".ljust(80), file=sys.stderr, flush=True)
    print(f"ingested: {done}  deduplicated: {dedup}  failed: {len(failed)}")
    for f, why in failed:
        print(f"  failed {f}: {why}")
    return 1 if failed else 0


def cmd_admin(args: argparse.Namespace) -> int:
    """`admin bootstrap`: make a new deployment usable: the search index, the first management key."""
    from engram.wiring import build

    settings = settings_of(args)
    engram = build(settings.model_copy(update={"embedder": "none"}))
    engram.index.ensure()
    where = settings.opensearch_index if settings.backend == "aws" else "sqlite"
    print(f"search index ready ({settings.backend}: {where})")
    if args.scope:
        engram.identity.register_scopes(args.context, args.scope)
        print(f"registered scopes: {', '.join(args.scope)}")
    if getattr(args, "mcp_url", ""):
        print(f"MCP endpoint: {args.mcp_url}")
    secret, principal = engram.identity.create_key([args.context], "management", args.grant, "bootstrap")
    print(f"management key {principal.key_id} for context {args.context}, grant {','.join(principal.grant)}")
    print("Store this key now; it is not shown again:")
    print(secret)
    return 0


def _workers(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 64:
        raise argparse.ArgumentTypeError(f"a number of processes from 1 to 64, not {text!r}")
    return n


def parser() -> argparse.ArgumentParser:

    p = argparse.ArgumentParser(prog="engram", description="Memory and knowledge service for AI agents")
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--data-dir", type=Path, help="data directory (default ./.engram, or ENGRAM_DATA_DIR)")
        sp.add_argument("--stack", help="a deployed stack: use its DynamoDB, S3 and OpenSearch (AWS credentials)")
        sp.add_argument("--region", help="the stack's region (default AWS_REGION, or us-east-1)")

    s = sub.add_parser("serve", help="serve MCP (Streamable HTTP) and REST")
    common(s)
    s.add_argument("--host")
    s.add_argument("--port", type=int)
    s.add_argument("--log-level", default="info")
    s.add_argument("--workers", type=_workers, help="server processes on the port (default 1, or ENGRAM_WORKERS)")
    s.set_defaults(fn=cmd_serve)
    s = sub.add_parser("stdio", help="serve MCP over stdio (ENGRAM_API_KEY, ENGRAM_CONTEXT)")
    common(s)
    s.set_defaults(fn=cmd_stdio)

    ing = sub.add_parser("ingest", help="ingest files and folders (ENGRAM_API_KEY or --key)")
    common(ing)
    ing.add_argument("paths", nargs="+")
    ing.add_argument("--key", help="API key (default ENGRAM_API_KEY)")
    ing.add_argument("--context", help="context (default: the key's only one)")
    ing.add_argument("--collection", default=None)
    ing.set_defaults(fn=cmd_ingest)

    k = sub.add_parser("keys", help="create, list, revoke API keys")
    ks = k.add_subparsers(dest="keys_cmd", required=True)
    kc = ks.add_parser("create")
    common(kc)
    kc.add_argument("--context", action="append", required=True, help="context the key may use (repeatable)")
    kc.add_argument("--principal", required=True, choices=["agent", "supervisor", "management"])
    kc.add_argument("--grant", action="append", required=True, help="grant scope path (repeatable)")
    kc.add_argument("--label")
    kl = ks.add_parser("list")
    common(kl)
    kr = ks.add_parser("revoke")
    common(kr)
    kr.add_argument("key_id")
    for sp in (kc, kl, kr):
        sp.set_defaults(fn=cmd_keys)

    sc = sub.add_parser("scopes", help="register scope paths")
    scs = sc.add_subparsers(dest="scopes_cmd", required=True)
    scc = scs.add_parser("create")
    common(scc)
    scc.add_argument("--context", required=True)
    scc.add_argument("paths", nargs="+")
    scl = scs.add_parser("list")
    common(scl)
    scl.add_argument("--context", required=True)
    for sp in (scc, scl):
        sp.set_defaults(fn=cmd_scopes)

    sh = sub.add_parser("schemas", help="register record / document / identity schemas")
    shs = sh.add_subparsers(dest="schemas_cmd", required=True)
    shc = shs.add_parser("create", help="register (or replace) the schema a JSON file describes")
    common(shc)
    shc.add_argument("--context", required=True)
    shc.add_argument("file", help='JSON: {"type", "surface", "jsonSchema", "lookupFields", "indexMode", ...}')
    shl = shs.add_parser("list")
    common(shl)
    shl.add_argument("--context", required=True)
    for sp in (shc, shl):
        sp.set_defaults(fn=cmd_schemas)

    ws = sub.add_parser("workspace", help="the code workspace (Agrama's tools)")
    wss = ws.add_subparsers(dest="workspace_cmd", required=True)
    wi = wss.add_parser("import", help="import a source tree (honours .gitignore)")
    common(wi)
    wi.add_argument("path")
    wi.add_argument("--key", help="an Engram key (default: ENGRAM_API_KEY)")
    wi.add_argument("--context", help="default: the key's only context (or ENGRAM_CONTEXT)")
    wi.add_argument("--prefix", default=".", help="the folder in the workspace to import into")
    wi.add_argument("--reason", default="workspace import")
    wi.add_argument("--agent-id", dest="agent_id")
    wi.set_defaults(fn=cmd_workspace)

    add_governance(sub, common)
    add_portability(sub, common)

    ad = sub.add_parser("admin", help="operate a deployment")
    ads = ad.add_subparsers(dest="admin_cmd", required=True)
    boot = ads.add_parser("bootstrap", help="create the search index and the first management key")
    common(boot)
    boot.add_argument("--context", required=True, help="the first context, e.g. acme-prod")
    boot.add_argument("--grant", action="append", required=True, help="grant scope path (repeatable)")
    boot.add_argument("--scope", action="append", default=[], help="scope path to register (repeatable)")
    boot.set_defaults(fn=cmd_admin)
    rei = ads.add_parser("reindex", help="make a context's search index again from the record store")
    common(rei)
    which = rei.add_mutually_exclusive_group(required=True)
    which.add_argument("--context")
    which.add_argument("--all", action="store_true", help="every context a key names")
    rei.set_defaults(fn=cmd_reindex)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if argv is None and args.fn in (cmd_serve, cmd_stdio):  # a server process of its own (not a call in process)
        with_huge_pages(Settings())  # the environment's settings (a --stack is read once, after)
    if os.environ.get("ENGRAM_DEBUG"):
        return int(args.fn(args))
    try:
        return int(args.fn(args))
    except EngramError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
