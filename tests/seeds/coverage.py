"""Which of a seed's tools its replay module exercised, and how: printed at the end of the run
(`seed coverage: N/M tools`, by tests/conftest.py). A tool Engram lacks is an expected failure that
names the issue adding it, never a skip."""

from __future__ import annotations

SEEDS: dict[str, list[str]] = {}  # seed -> every tool its document names
PASSED: dict[str, set[str]] = {}  # seed -> tools whose example calls passed


def declare(seed: str, tools: list[str]) -> None:
    SEEDS[seed] = tools
    PASSED.setdefault(seed, set())


def passed(seed: str, tool: str) -> None:
    assert tool in SEEDS[seed], f"{tool} is not a tool of {seed}"
    PASSED[seed].add(tool)


def lines() -> list[str]:
    return [
        f"seed coverage: {seed} {len(PASSED.get(seed, set()))}/{len(tools)} tools"
        + (
            f" (missing: {', '.join(t for t in tools if t not in PASSED.get(seed, set()))})"
            if len(PASSED.get(seed, set())) < len(tools)
            else ""
        )
        for seed, tools in sorted(SEEDS.items())
    ]
