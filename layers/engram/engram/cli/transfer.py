"""`engram` commands that move memory: a whole context's export and import (`engram.transfer.archive`), a running
local server's backup and its restore (`engram.adapters.local.backup`), and the importers from other systems
(`engram.transfer.importers`)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engram.cli.common import cmd_reindex, settings_of


class Bar:
    """Progress on standard error: a line redrawn in place on a terminal, nothing when piped."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.started = time.perf_counter()
        self.on = sys.stderr.isatty()

    def __call__(self, what: str, n: int) -> None:
        if self.on:
            rate = n / max(time.perf_counter() - self.started, 1e-9)
            print(f"\r{self.label}: {what} {n:,} ({rate:,.0f}/s)", end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.on:
            print(file=sys.stderr)


def _finish(engram: Any) -> None:
    """The jobs the writes queued (embeddings, the graph), run here on a local data folder; on AWS the
    deployment's worker runs them (this command does not take the deployment's queue from it)."""
    if engram.settings.backend == "local":
        engram.queue.join()


def cmd_context_export(args: argparse.Namespace) -> int:
    """`export --context C [--out F] [--audit]`: the whole context (`engram.transfer.archive`), written beside under
    another name and renamed when complete."""
    from engram.transfer.archive import export
    from engram.wiring import build

    engram = build(settings_of(args).model_copy(update={"queue_worker": False}))
    out = Path(args.out or f"{args.context}.engram.jsonl.gz")
    partial = out.with_name(out.name + ".partial")
    bar = Bar(f"export {args.context}")
    with partial.open("wb") as f:
        counts = export(engram, args.context, f, audit=args.audit, progress=bar)
    partial.replace(out)
    bar.done()
    print(json.dumps({"file": str(out), "size": out.stat().st_size, **counts.as_dict()}))
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """`import FILE`: an export into this deployment (resumes a stopped import; twice changes nothing)."""
    from engram.transfer.archive import import_file
    from engram.wiring import build

    engram = build(settings_of(args).model_copy(update={"queue_worker": False}))
    bar = Bar(f"import {args.file}")
    counts = import_file(engram, Path(args.file), progress=bar)
    _finish(engram)
    bar.done()
    print(json.dumps(counts.as_dict()))
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    """`backup --to DIR`: a consistent copy of the local data folder, while the server runs."""
    from engram.adapters.local.backup import backup

    manifest = backup(settings_of(args).data_dir, Path(args.to))
    print(json.dumps({k: v for k, v in manifest.items() if k != "files"} | {"files": len(manifest["files"])}))
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    """`restore --from DIR`: a checked backup back in the data folder (server stopped), its index made again."""
    from engram.adapters.local.backup import restore

    settings = settings_of(args)
    done = restore(Path(args.source), settings.data_dir, force=args.force)
    print(json.dumps(done))
    if args.no_reindex:
        return 0
    return cmd_reindex(argparse.Namespace(**{**vars(args), "context": None}))


def cmd_import_from(args: argparse.Namespace) -> int:
    """`import-from SYSTEM PATH --context C --scope S`: another system's export (`engram.transfer.importers`)."""
    from engram.kernel.caller import Caller, Principal
    from engram.transfer.importers import run
    from engram.wiring import build

    engram = build(settings_of(args).model_copy(update={"queue_worker": False}))
    grant = args.scope.split("/{", 1)[0]  # a scope naming each user's ({user_id}): the operator holds its root
    caller = Caller(Principal("cli", "management", (args.context,), (grant,)), args.context, "cli")
    done = run(args.system, Path(args.path), engram, caller, args.scope)
    _finish(engram)
    print(json.dumps(done))
    return 0


def add_portability(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                    common: Callable[[argparse.ArgumentParser], None]) -> None:  # fmt: skip
    im = sub.add_parser("import", help="import an `engram export --context` file (local, or --stack)")
    common(im)
    im.add_argument("file", help="the .jsonl.gz file")
    im.set_defaults(fn=cmd_import)
    fr = sub.add_parser("import-from", help="import another system's export (mcp-memory, mem0, basic-memory, "
                        "chatgpt, claude): says what it mapped and what it skipped")  # fmt: skip
    common(fr)
    fr.add_argument("system", choices=["mcp-memory", "mem0", "basic-memory", "chatgpt", "claude"])
    fr.add_argument("path", help="the export file (basic-memory: the folder of notes)")
    fr.add_argument("--context", required=True)
    fr.add_argument("--scope", required=True, help="where it goes, e.g. org/acme/user/alice (mem0: may hold {user_id})")
    fr.set_defaults(fn=cmd_import_from)
    bk = sub.add_parser("backup", help="a consistent copy of a running local server's data (SQLite online backup)")
    common(bk)
    bk.add_argument("--to", required=True, help="a new folder for the copy")
    bk.set_defaults(fn=cmd_backup)
    rs = sub.add_parser("restore", help="put a backup back (stop the server first)")
    common(rs)
    rs.add_argument("--from", dest="source", required=True, help="the backup folder")
    rs.add_argument("--force", action="store_true", help="replace a data folder that holds data (kept aside)")
    rs.add_argument("--no-reindex", action="store_true", help="do not make the search index again from the records")
    rs.set_defaults(fn=cmd_restore)
