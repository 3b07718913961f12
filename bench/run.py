"""`make bench`: every benchmark, printed as JSON and as the tables of bench/RESULTS.md."""

from __future__ import annotations

import json
import platform
import sys

from bench import latency, locomo


def main() -> None:
    print("LoCoMo evidence recall (stores 5,882 turns, ~2 min)...", file=sys.stderr, flush=True)
    lo = locomo.run()
    print("HTTP latency at 10,000 memories...", file=sys.stderr, flush=True)
    la = latency.run()
    print(
        json.dumps(
            {
                "machine": f"{platform.machine()} {platform.processor()} {platform.python_version()}",
                "locomo": lo,
                "latency": la,
            },
            indent=2,
        )
    )
    print("\n| mode | recall@5 | recall@10 | ms/query |\n|---|---|---|---|")
    for mode, v in lo["modes"].items():
        print(f"| {mode} | {v['recall']['all']['@5']} | {v['recall']['all']['@10']} | {v['ms_per_query']} |")


if __name__ == "__main__":
    main()
