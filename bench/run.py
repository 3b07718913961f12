"""`make bench`: every benchmark (or those named: locomo, latency, cranfield, cisi, scores, conversations,
records, workspace, cranfield-opensearch, coldstart, lambda, hostile, conll04, protocol, reads, erasure), as JSON on
stdout and in bench/out/latest.json; bench/RESULTS.md keeps the figures with how and where they were measured."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any


def main(names: list[str]) -> None:
    from bench import (
        access,
        coldstart,
        conll04,
        conversations,
        cranfield,
        erasure,
        hostile,
        lambda_latency,
        latency,
        locomo,
        protocol,
        reads,
        records,
        scores,
        workspace,
    )

    benches = {
        "locomo": locomo.run,
        "latency": latency.run,
        "cranfield": cranfield.run,
        "cisi": cranfield.run_cisi,
        "scores": scores.run,
        "conversations": conversations.run,
        "records": records.run,
        "workspace": workspace.run,
        "cranfield-opensearch": cranfield.run_opensearch,
        "coldstart": coldstart.run,
        "lambda": lambda_latency.run,
        "hostile": hostile.run,
        "conll04": conll04.run,
        "protocol": protocol.run,
        "reads": reads.run,
        "erasure": erasure.run,
        "access": access.run,
    }
    chosen = names or list(benches)
    out: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    }
    for i, name in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {name} ...", file=sys.stderr, flush=True)
        out[name] = benches[name]()
        print(json.dumps({name: out[name]}, indent=2), flush=True)
    target = Path(__file__).with_name("out")
    target.mkdir(exist_ok=True)
    (target / "latest.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
