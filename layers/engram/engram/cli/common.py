"""What the `engram` commands share: the settings a command runs with (its flags, a deployed stack's outputs) and
`admin reindex`, which `restore` runs too. `engram.cli.main` builds the parser; the governance and transfer
commands (`engram.cli.governance`, `engram.cli.transfer`) import from here, never from `main`."""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from typing import Any, cast

from engram.kernel.errors import EngramError
from engram.settings import Settings


def stack_settings_of(args: argparse.Namespace) -> dict[str, Any]:
    """With --stack: the settings of a deployed stack, from its CloudFormation outputs."""
    if not getattr(args, "stack", None):
        return {}
    import boto3

    from engram.adapters.aws.stack import stack_settings

    region = args.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    try:
        found = stack_settings(boto3.client("cloudformation", region_name=region), args.stack)
    except Exception as exc:
        raise EngramError(f"cannot read stack {args.stack} in {region}: {exc}") from exc
    args.mcp_url = found.pop("mcp_url", "")  # for `admin bootstrap` to print
    return {**found, "aws_region": region}


def overrides_of(args: argparse.Namespace) -> dict[str, Any]:
    """The settings a command's flags (and a deployed stack's outputs) set over the environment's."""
    flags = {
        "data_dir": getattr(args, "data_dir", None),
        "host": getattr(args, "host", None),
        "port": getattr(args, "port", None),
        "workers": getattr(args, "workers", None),
    }
    return {k: v for k, v in flags.items() if v is not None} | stack_settings_of(args)


def settings_of(args: argparse.Namespace) -> Settings:
    return Settings(**overrides_of(args))


def cmd_reindex(args: argparse.Namespace) -> int:
    """`admin reindex`: a context's search index (or every context's) made again from the record store."""
    from engram.search.reindex import rebuild
    from engram.wiring import build

    engram = build(settings_of(args).model_copy(update={"queue_worker": False}))
    keys = engram.identity.list_keys()
    unsettled = 0
    for ctx in [args.context] if args.context else sorted({c for k in keys for c in cast(list[str], k["contexts"])}):
        done = rebuild(engram, ctx, partial(_progress, ctx))
        print(file=sys.stderr)  # the progress line ends; the summary goes to standard output
        print(f"{ctx}: " + ", ".join(f"{fam} {n}" for fam, n in done["indexed"].items()) + " indexed")
        if done["unsettled"]:
            print(f"{ctx}: {done['unsettled']} objects still changing after {done['passes'] + 1} passes: run it again")
        unsettled += done["unsettled"]
    return 1 if unsettled else 0


def _progress(ctx: str, family: str, n: int) -> None:
    print(f"\r{ctx} {family}: {n}", end="", file=sys.stderr)
