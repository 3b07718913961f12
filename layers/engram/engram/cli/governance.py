"""`engram` governance commands: the audit trail, erasure, OAuth issuers, quotas and usage (`engram.cli.main`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram.cli.common import settings_of

if TYPE_CHECKING:
    from engram.kernel.caller import Caller
    from engram.wiring import Engram


def cmd_audit(args: argparse.Namespace) -> int:
    """`audit verify`: check a context's hash chain (exit 1 on a problem); `audit query`: its entries."""
    from engram.wiring import build

    engram = build(settings_of(args).model_copy(update={"embedder": "none"}))
    if args.audit_cmd == "verify":
        report = engram.audit.verify(args.context)
        print(json.dumps(report, indent=2))
        if not report["ok"]:
            first = report["problems"][0]
            print(f"audit trail of {args.context}: {len(report['problems'])} problem(s); the first at entry "
                  f"{first['seq']}: {first['problem']}", file=sys.stderr)  # fmt: skip
        return 0 if report["ok"] else 1
    page = engram.audit.query(args.context, args.since, args.until, None, args.key_id, args.tool, args.object_id,
                              None, args.limit)  # fmt: skip
    for entry in page["entries"]:
        print(json.dumps(entry))
    return 0


def cmd_oauth(args: argparse.Namespace) -> int:
    """`oauth trust|list|distrust`: the OAuth authorization servers a context trusts (as its operator)."""
    from engram.wiring import build_identity

    identity = build_identity(settings_of(args))
    if args.oauth_cmd == "trust":
        fields = {
            "issuer": args.issuer,
            "audience": args.audience,
            "grant": args.grant,
            "roles": args.role or ["agent"],
            "jwks_uri": args.jwks_uri,
            "principal_claim": args.principal_claim,
            "scope_claim": args.scope_claim,
            "grant_template": args.grant_template,
        }
        print(json.dumps(identity.trust_issuer(None, fields, args.context).model_dump()))
    elif args.oauth_cmd == "distrust":
        identity.issuers.remove(args.context, args.issuer)
    else:
        for policy in identity.issuers.of_context(args.context):
            print(json.dumps(policy.model_dump()))
    return 0


def cmd_quota(args: argparse.Namespace) -> int:
    """`quota set|get`: a context's quotas, or one key's in it; `usage`: what its calls cost."""
    from engram.trust.quotas import QuotaLimits
    from engram.wiring import build

    engram = build(settings_of(args).model_copy(update={"embedder": "none"}))
    if args.quota_cmd == "set":
        names = ("requests_per_minute", "writes_per_day", "stored_bytes", "embeddings_per_day")
        engram.quotas.set(args.context, args.key_id, QuotaLimits(**{n: getattr(args, n) for n in names}), "cli")
    if args.quota_cmd == "usage":
        from datetime import timedelta

        from engram.kernel.clock import parse_time

        now = engram.clock.now()
        since = parse_time(args.since) or now - timedelta(days=7)
        for row in engram.audit.usage(args.context, since, parse_time(args.until) or now, args.key_id, args.tool):
            print(json.dumps(row))
        return 0
    print(
        json.dumps({"context_id": args.context, "key_id": args.key_id, **engram.quotas.use(args.context, args.key_id)})
    )
    return 0


def _operator(args: argparse.Namespace, embed: bool = False) -> tuple[Engram, Caller, str]:
    """The stores, and the deployment's operator (no key: the CLI has the stores) granted the subject's path;
    with `embed`, the deployment's embedder too (an erasure run here: its look for traces searches by vector as
    well, and an entity others keep is indexed again with its vector)."""
    from engram.kernel.caller import Caller, Principal
    from engram.wiring import build

    engram = build(
        settings_of(args).model_copy(update={"queue_worker": False, **({} if embed else {"embedder": "none"})})
    )

    def operator(grant: tuple[str, ...]) -> Caller:
        return Caller(Principal("cli", "management", (args.context,), grant), args.context, "cli")

    scope = args.scope
    if scope is None:  # a principal's path, looked up over every registered root of the context
        roots = tuple(sorted({p.split("/")[0] for p in engram.identity.registered(args.context)}))
        scope = engram.erasure.subject(operator(roots), None, args.external_id).scope
    assert scope is not None
    return engram, operator((scope,)), scope


def cmd_export(args: argparse.Namespace) -> int:
    """`export`: everything a subject owns, as JSON Lines (one object a line, its earlier versions whole even when
    they spanned pages), to --out or standard output. The file appears whole or not at all: it is written beside
    under another name and renamed when the last page is in (a failed export leaves no file to take for one)."""
    if not args.scope and not args.external_id:
        from engram.cli.transfer import cmd_context_export

        return cmd_context_export(args)
    engram, caller, scope = _operator(args)
    subject = engram.erasure.subject(caller, scope, None)
    partial = Path(f"{args.out}.partial") if args.out else None
    out = partial.open("w", encoding="utf-8") if partial is not None else sys.stdout
    n, cursor, complete = 0, None, False
    held: dict[str, Any] | None = None  # the last object given: its history may go on in the next page
    try:
        while True:
            page = engram.subject_access.export(caller, subject, cursor, 500)
            for object_ in page["objects"]:
                if object_.get("continued") and held is not None and _same(held, object_):
                    held["earlier"] += object_["earlier"]  # one line an object, its history whole
                    continue
                if held is not None:
                    out.write(json.dumps(held, ensure_ascii=False) + "\n")
                    n += 1
                held = object_
            cursor = page["cursor"]
            if cursor is None:
                break
        if held is not None:
            out.write(json.dumps(held, ensure_ascii=False) + "\n")
            n += 1
        complete = True
    finally:
        if partial is not None:
            out.close()
            if complete:
                partial.replace(args.out)
            else:
                partial.unlink(missing_ok=True)
    print(f"{n} object(s) of {scope} in {args.context}", file=sys.stderr)
    return 0


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return bool(a["kind"] == b["kind"] and a["id"] == b["id"])


def cmd_erase(args: argparse.Namespace) -> int:
    """`erase`: as the deployment's operator, preview or erase a subject; with --wait, run the job here and
    print the signed receipt."""
    engram, caller, scope = _operator(args, embed=args.wait and not args.preview)
    asked = engram.erasure.request(caller, engram.erasure.subject(caller, scope, None), args.preview)
    if args.preview or not args.wait:
        print(json.dumps(asked, indent=2))
        return 0
    engram.erasure.run(args.context, asked["request_id"], wait=True)  # or a server's worker runs it: wait for it
    print(json.dumps(engram.erasure.status(caller, asked["request_id"]), indent=2))
    return 0


def cmd_erasure(args: argparse.Namespace) -> int:
    """`erasure verify RECEIPT`: check a receipt's signature offline (exit status 1 when it does not hold)."""
    from engram.trust.receipts import verify

    try:
        receipt = json.loads(Path(args.receipt).read_text())
    except (OSError, ValueError) as exc:
        print(f"error: cannot read a receipt from {args.receipt}: {exc}", file=sys.stderr)
        return 2
    if isinstance(receipt, dict) and isinstance(receipt.get("receipt"), dict):
        receipt = receipt["receipt"]  # erasure_status's answer, as saved
    key = args.public_key
    if key is None and args.url is not None:
        try:
            key = published_receipt_key(args.url)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    valid, why = verify(receipt, key) if isinstance(receipt, dict) else (False, "not a JSON object")
    print(f"{'valid' if valid else 'INVALID'}: {why}")
    return 0 if valid else 1


def published_receipt_key(url: str) -> str:
    """The receipt key a deployment publishes (`/.well-known/engram-receipt-key` under its base URL: https, or
    http to loopback). Raises ValueError when it cannot be read."""
    import httpx

    from engram.kernel.errors import InvalidInput
    from engram.trust.oauth import check_url

    try:
        base = check_url(url.rstrip("/"), "--url")
        answer = httpx.get(f"{base}/.well-known/engram-receipt-key", timeout=10, follow_redirects=False)
        answer.raise_for_status()
        body = answer.json()
    except (InvalidInput, httpx.HTTPError, ValueError) as exc:
        raise ValueError(f"cannot read the deployment's receipt key from {url}: {exc}") from None
    if not isinstance(body, dict) or body.get("algorithm") != "Ed25519" or not isinstance(body.get("public_key"), str):
        raise ValueError(f"{url} publishes no Ed25519 receipt key")
    return str(body["public_key"])


def add_governance(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                   common: Callable[[argparse.ArgumentParser], None]) -> None:  # fmt: skip
    def subject_command(name: str, help: str, required: bool = True) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, help=help)
        common(parser)
        parser.add_argument("--context", required=True)
        who = parser.add_mutually_exclusive_group(required=required)
        who.add_argument("--scope", help="a scope path: it and everything under it")
        who.add_argument("--external-id", dest="external_id", help="a principal, by your id of it")
        return parser

    er = subject_command("erase", "erase a subject (a scope path, or a principal by externalId) everywhere")
    er.add_argument("--preview", action="store_true", help="count what would be erased; erase nothing")
    er.add_argument("--wait", action="store_true", help="run the erasure here and print its signed receipt")
    er.set_defaults(fn=cmd_erase)
    ex = subject_command(
        "export",
        "a whole context (engram.transfer.archive's .jsonl.gz), or with --scope / "
        "--external-id everything one subject owns: what an erasure of it would take",
        required=False,
    )
    ex.add_argument("--out", help="the file to write (a subject's: standard output without it)")
    ex.add_argument("--audit", action="store_true", help="a whole context's: its audit trail too")
    ex.set_defaults(fn=cmd_export)
    ev = sub.add_parser("erasure", help="erasure receipts")
    evs = ev.add_subparsers(dest="erasure_cmd", required=True)
    evv = evs.add_parser("verify", help="check a receipt's Ed25519 signature offline")
    evv.add_argument("receipt", help="the receipt (JSON), or erasure_status's answer holding it")
    pinned = evv.add_mutually_exclusive_group()
    pinned.add_argument("--public-key", dest="public_key", help="the deployment's published key (current_identity)")
    pinned.add_argument("--url", help="the deployment's base URL: its published key is fetched from there")
    evv.set_defaults(fn=cmd_erasure)

    au = sub.add_parser("audit", help="a context's audit trail: verify its hash chain, or list entries")
    aus = au.add_subparsers(dest="audit_cmd", required=True)
    av = aus.add_parser("verify", help="check the hash chain (exit status 1 when an entry was altered or removed)")
    common(av)
    av.add_argument("--context", required=True)
    av.set_defaults(fn=cmd_audit)
    aq = aus.add_parser("query", help="entries, newest first, as JSON lines")
    common(aq)
    aq.add_argument("--context", required=True)
    for flag in ("--since", "--until", "--tool", "--object-id", "--key-id"):
        aq.add_argument(flag, dest=flag[2:].replace("-", "_"))
    aq.add_argument("--limit", type=int, default=100)
    aq.set_defaults(fn=cmd_audit)

    oa = sub.add_parser("oauth", help="OAuth authorization servers a context trusts (tokens beside API keys)")
    oas = oa.add_subparsers(dest="oauth_cmd", required=True)
    ot = oas.add_parser("trust", help="trust an issuer's access tokens in a context, up to a grant and roles")
    common(ot)
    ot.add_argument("--context", required=True)
    ot.add_argument("--issuer", required=True, help="the authorization server's issuer URL (tokens' iss)")
    ot.add_argument("--audience", action="append", required=True, help="accepted aud: this resource's URL")
    ot.add_argument("--grant", action="append", required=True, help="widest grant path a token may carry")
    ot.add_argument("--role", action="append", choices=["agent", "supervisor", "management"], help="(repeatable)")
    ot.add_argument("--jwks-uri", dest="jwks_uri", help="default: the one the issuer's metadata names")
    ot.add_argument("--principal-claim", dest="principal_claim", default="sub")
    ot.add_argument("--scope-claim", dest="scope_claim", default="scope", help="the claim carrying the scopes")
    ot.add_argument("--grant-template", dest="grant_template", help="e.g. org/acme/user/{principal}")
    ot.set_defaults(fn=cmd_oauth)
    for name, text in (("list", "the issuers a context trusts"), ("distrust", "stop trusting an issuer")):
        one = oas.add_parser(name, help=text)
        common(one)
        one.add_argument("--context", required=True)
        if name == "distrust":
            one.add_argument("--issuer", required=True)
        one.set_defaults(fn=cmd_oauth)

    qu = sub.add_parser("quota", help="quotas of a context or of a key in it, and what calls cost")
    qus = qu.add_subparsers(dest="quota_cmd", required=True)
    for name, text in (("set", "set limits (unset: the settings' default)"), ("get", "limits and use now"),
                       ("usage", "cost per day, key and tool, as JSON lines")):  # fmt: skip
        one = qus.add_parser(name, help=text)
        common(one)
        one.add_argument("--context", required=True)
        one.add_argument("--key-id", dest="key_id")
        if name == "set":
            for flag in ("requests-per-minute", "writes-per-day", "stored-bytes", "embeddings-per-day"):
                one.add_argument(f"--{flag}", dest=flag.replace("-", "_"), type=int)
        if name == "usage":
            for flag in ("--since", "--until", "--tool"):
                one.add_argument(flag, dest=flag[2:])
        one.set_defaults(fn=cmd_quota)
