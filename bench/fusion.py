"""The floor hybrid search must beat on every dev collection (issue #12)."""

from __future__ import annotations

from collections import defaultdict


def rrf60(*lists: list[str]) -> list[str]:
    """The floor hybrid must beat (issue #12): a plain reciprocal rank fusion, k = 60, of ranked id lists."""
    fused: dict[str, float] = defaultdict(float)
    for ranked in lists:
        for rank, i in enumerate(ranked):
            fused[i] += 1 / (60 + rank + 1)
    return sorted(fused, key=lambda i: (-fused[i], i))
