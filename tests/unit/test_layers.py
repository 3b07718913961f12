"""Issue #55: the package reads like the manual's architecture page. The root holds sub-packages and the
composition root only; each sub-package sits on a layer and, at run time, imports only from its own layer or the
ones below; no module imports itself back through another (no import circle), whether at import time or
inside a function. The type checker may name a type from above (`engram.wiring.Engram`, which services are built
over): that is the one kind of upward reference, and it is listed here so a new one is a decision."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.aws_lambda.apigw import ROOT

PACKAGE = ROOT / "layers" / "engram" / "engram"
# Bottom to top. A module may import, at run time, from its own layer or any below it.
LAYERS = (
    ("__init__", "kernel"),
    ("search",),
    ("trust",),
    ("transfer",),
    ("families",),
    ("adapters",),
    ("settings", "wiring"),
    ("api",),
    ("cli",),
)
ROOT_MODULES = {"__init__.py", "wiring.py", "settings.py"}
# Types named for the type checker alone from a lower layer: the composition root (services are built over it),
# the two trust services the root hands the kernel (`engram.kernel.services.Kernel`), and what a family's eraser
# and reindexer yield (`engram.kernel.family.Eraser`, `Reindexer`).
TYPE_ONLY_UP = {
    "engram.wiring",
    "engram.settings",
    "engram.trust.audit",
    "engram.trust.identity",
    "engram.trust.erasure",
    "engram.search.reindex",
    "engram.search.rules",
}


def _module(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path) -> tuple[set[str], set[str], set[str]]:
    """(imported when the module loads, imported inside a function, named for the type checker alone): the
    engram modules each names."""
    tree = ast.parse(path.read_text())
    typing = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for n in ast.walk(block)
    }
    late = {
        id(n) for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) for n in ast.walk(fn)
    }
    at_load: set[str] = set()
    in_function: set[str] = set()
    typed: set[str] = set()
    for node in ast.walk(tree):
        names: set[str] = set()
        if isinstance(node, ast.Import):
            names = {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        names = {n for n in names if n.startswith("engram")}
        target = typed if id(node) in typing else in_function if id(node) in late else at_load
        target |= names
    return at_load, in_function, typed


def _owner(name: str) -> str:
    """The module an imported name lives in (`engram.kernel.errors.NotFound` -> `engram.kernel.errors`)."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _layer(module: str) -> int:
    part = module.split(".")[1] if module.count(".") else "__init__"
    return next(i for i, names in enumerate(LAYERS) if part in names)


GRAPH = {m: tuple({_owner(n) for n in names} - {m} for names in _imports(p)) for m, p in MODULES.items()}


def test_the_root_holds_sub_packages_and_the_composition_root_only() -> None:
    files = {p.name for p in PACKAGE.glob("*.py")}
    assert files == ROOT_MODULES, f"modules at the package root: {sorted(files - ROOT_MODULES)}"
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == {"kernel", "search", "trust", "transfer", "families", "adapters", "api", "cli"}


def test_imports_at_run_time_go_down_the_layers_only() -> None:
    bad = [
        f"{m} -> {d}"
        for m, (at_load, in_function, _) in GRAPH.items()
        for d in at_load | in_function
        if _layer(d) > _layer(m)
    ]
    assert not bad, bad


def test_the_type_checker_alone_names_a_type_from_above_and_only_the_composition_root() -> None:
    up = {(m, d) for m, (_, _, typed) in GRAPH.items() for d in typed if _layer(d) > _layer(m)}
    assert {d for _, d in up} <= {_owner(n) for n in TYPE_ONLY_UP}, sorted(up)


def test_no_import_circle() -> None:
    """Depth-first over every run-time import (at load and inside functions): a module reached again while it is
    still being walked is a circle. A module naming its own package (`from engram.families.entities import
    INDEX_JOB`) is not an edge: Python loads a package before its modules, and no package loads at import time a
    module of its own that names it back (asserted first)."""
    for m, (at_load, _, _) in GRAPH.items():
        if MODULES[m].name == "__init__.py":
            back = {d for d in at_load if d.startswith(m + ".") and m in GRAPH[d][0] | GRAPH[d][1]}
            assert not back, f"{m} loads {sorted(back)}, which import it back"
    edges = {
        m: {d for d in at_load | in_function if not m.startswith(d + ".")}
        for m, (at_load, in_function, _) in GRAPH.items()
    }
    state: dict[str, int] = {}
    circles: list[list[str]] = []

    def walk(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(edges.get(m, ())):
            if state.get(d) == 1:
                circles.append([*path[path.index(d) :], d])
            elif d not in state:
                walk(d, [*path, d])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            walk(m, [m])
    assert not circles, circles


def test_the_circles_of_before_are_gone() -> None:
    """The two the review of #55 named: the command line and its governance commands (now `engram.cli.common`
    holds what they share), and the family registry, `Family` and the composition root (the root's type is named
    for the type checker alone)."""
    assert "engram.cli.main" not in GRAPH["engram.cli.governance"][0] | GRAPH["engram.cli.governance"][1]
    assert "engram.cli.main" not in GRAPH["engram.cli.transfer"][0] | GRAPH["engram.cli.transfer"][1]
    at_run_time = GRAPH["engram.kernel.family"][0] | GRAPH["engram.kernel.family"][1]
    assert not {d for d in at_run_time if d.startswith(("engram.wiring", "engram.families"))}
