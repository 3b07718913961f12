"""Issue #24: a family is a package (`engram/families/<name>/`), registered by one line, and it is whole — its
function, routes and alarms in template.yaml, its kinds, its jobs' handlers and its seed replays. This walks every
registered family and fails when one lacks any of them; and it checks the import graph: each family is its own
package above the kernel, and nothing below the API layer imports a transport or a cloud SDK."""

from __future__ import annotations

import ast
import importlib
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from engram.families import NAMES, all_families, select
from engram.kernel.family import Family
from engram.kernel.kinds import Kinds
from engram.settings import Settings
from engram.wiring import build_local
from tests.aws_lambda.apigw import ROOT, routes, template
from tests.seeds import coverage

PACKAGE = ROOT / "layers" / "engram" / "engram"
FAMILIES = all_families()
KINDS = Kinds(*(f.kinds for f in FAMILIES))  # the catalogue the composition root makes
# The composition root and the entry points sit above every family; the API layer above them too.
ABOVE = {"engram.wiring"} | {f"engram.cli.{p.stem}" for p in (PACKAGE / "cli").glob("*.py")} | {"engram.cli"}


def ids(f: Family) -> str:
    return f.name


def test_every_family_folder_is_registered_and_every_registered_family_has_a_folder() -> None:
    folders = {p.parent.name for p in (PACKAGE / "families").glob("*/__init__.py")}
    assert folders == set(NAMES)
    assert [f.name for f in FAMILIES] == list(NAMES)
    for f in FAMILIES:  # its operations declared with its own family name
        assert select(family=f.name), f"family {f.name} declares no operation"
        assert all(op.family in NAMES for op in select())


@pytest.mark.parametrize("fam", FAMILIES, ids=ids)
def test_a_family_has_its_function(fam: Family) -> None:
    resources = template()["Resources"]
    function = resources.get(fam.function)
    assert function is not None and function["Type"] == "AWS::Serverless::Function", f"no {fam.function}"
    assert function["Properties"]["Handler"] == "app.handler"
    assert (ROOT / "functions" / fam.name / "app.py").exists()
    assert f"build-{fam.function}:" in (ROOT / "functions" / "Makefile").read_text()
    gateway = resources["GatewayFunction"]["Properties"]["Environment"]["Variables"]["ENGRAM_FAMILY_FUNCTIONS"]
    assert json.loads(re.sub(r"\$\{(\w+)\}", r"\1", gateway)).get(fam.name) == f"{fam.function}Aliaslive"
    assert any(r.path == f"/mcp/{fam.name}" and r.function == fam.function for r in routes())


@pytest.mark.parametrize("fam", FAMILIES, ids=ids)
def test_every_rest_path_of_a_family_is_routed_to_its_function(fam: Family) -> None:
    routed = {(r.method, r.path) for r in routes() if r.function == fam.function and r.authorized}
    for op in select(family=fam.name):
        for path in (op.path, *op.also):
            assert (op.method, "/api/v1/{context_id}" + path) in routed, f"{op.name} {op.method} {path} unrouted"


@pytest.mark.parametrize("fam", FAMILIES, ids=ids)
def test_a_family_function_has_its_alarms(fam: Family) -> None:
    resources = template()["Resources"]
    stem = fam.function.removesuffix("Function")
    for metric in ("Errors", "Throttles"):
        alarm = resources.get(f"{stem}{metric}Alarm")
        assert alarm is not None, f"no {metric} alarm for {fam.function}"
        assert alarm["Properties"]["MetricName"] == metric
        assert alarm["Properties"]["Dimensions"] == [{"Name": "FunctionName", "Value": fam.function}]  # !Ref


def _writes_records(fam: Family) -> bool:
    return any("Write(" in p.read_text() for p in (PACKAGE / "families" / fam.name).glob("*.py"))


@pytest.mark.parametrize("fam", FAMILIES, ids=ids)
def test_a_family_declares_the_kinds_it_owns(fam: Family) -> None:
    if _writes_records(fam):
        assert fam.kinds, f"family {fam.name} writes records but declares no kind"
    for name, kind in fam.kinds.items():
        assert kind.family == fam.name, f"{name} is declared by {fam.name} for {kind.family}"
        assert KINDS[name] is kind  # in the catalogue the adapters' guards read
        if kind.access == "via":
            assert kind.via in KINDS, f"{name} is seen via {kind.via}, which nobody declares"
        if kind.indexed:  # an index document carries its object's scopes: the object must have some
            owner = KINDS[kind.via] if kind.access == "via" and kind.via else kind
            assert owner.access == "scoped", f"indexed kind {name} is seen through no scoped record"
    owned = Counter(name for f in FAMILIES for name in f.kinds)
    assert all(n == 1 for n in owned.values()), "a kind declared by two families"


@pytest.mark.parametrize("fam", FAMILIES, ids=ids)
def test_a_family_jobs_lead_to_methods_of_its_services(fam: Family, tmp_path: Path) -> None:
    root = build_local(Settings(data_dir=tmp_path, embedder="none", queue_worker=False))
    services = root.services(fam.services)
    for name, job in fam.jobs.items():  # a bound method of one of the family's own services
        handler = job.handler(services)
        assert callable(handler), f"job {name}: {handler!r}"
        assert any(handler.__self__ is getattr(services, s) for s in fam.service_names()), name
        if job.batch is not None:
            assert callable(job.batch(services)), f"job {name}: its batch"
    for name, job in fam.jobs.items():  # registered with the queue: a worker finds its handler by name
        root.queue.check(name, {})  # raises KeyError for a job nobody handles
        assert root.queue.batches(name) == (job.batch is not None)


def _seed_tools(seed: str) -> list[str]:
    importlib.import_module(f"tests.seeds.test_{seed}")  # declares the seed's tools (`coverage.declare`)
    return coverage.SEEDS[seed]


@pytest.mark.parametrize("fam", FAMILIES, ids=ids)
def test_a_family_has_its_seed_replays(fam: Family) -> None:
    assert fam.seeds, f"family {fam.name} names no seed"
    names = {n for op in select(family=fam.name) for n in op.names}
    for seed in fam.seeds:
        assert (ROOT / "tests" / "seeds" / f"test_{seed}.py").exists(), f"no replay of {seed}"
        assert names & set(_seed_tools(seed)), f"{seed}'s replay exercises none of {fam.name}'s tools"
    seeds = [p.stem.removeprefix("test_") for p in (ROOT / "tests" / "seeds").glob("test_*.py")]
    for seed in seeds:  # a seed tool this family answers: the seed is the family's
        if names & set(_seed_tools(seed)):
            assert seed in fam.seeds, f"{fam.name} answers {seed}'s tools but does not name {seed}"


def _imports(path: Path) -> set[str]:
    """What a module imports when it runs (what it names for the type checker alone aside)."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for n in ast.walk(block)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def _module(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


def test_each_family_is_its_own_package_above_the_kernel() -> None:
    transports = ("fastapi", "starlette", "mcp", "boto3", "botocore", "opensearchpy", "mangum", "uvicorn")
    for path in PACKAGE.rglob("*.py"):
        module, imported = _module(path), _imports(path)
        below_api = not module.startswith(("engram.api", "engram.adapters")) and module not in ABOVE
        if below_api:  # domain logic and the kernel: no transport, no cloud SDK, no adapter, no API
            bad = {
                i for i in imported if i.split(".")[0] in transports or i.startswith(("engram.api", "engram.adapters"))
            }
            assert not bad, f"{module} imports {sorted(bad)}"
            assert not imported & ABOVE, f"{module} imports the composition root"
        kernel = below_api and not module.startswith("engram.families")
        if kernel:  # the kernel knows no family (the registry, engram.families, loads them by name)
            assert not {i for i in imported if i.startswith("engram.families")}, f"kernel {module} imports a family"
        if module.startswith("engram.families."):
            own = module.split(".")[2]
            others = {i.split(".")[2] for i in imported if i.startswith("engram.families.") and len(i.split(".")) > 2}
            assert others <= set(NAMES), f"{module} imports {others - set(NAMES)}"
            assert own in NAMES


def test_the_package_keeps_the_house_limits() -> None:
    """Issue #24: no file in the package over 500 lines (where one grows past it, a part moves to its own
    module), and at most five `type: ignore`, each naming its error code and saying why after it."""
    long = {_module(p): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 500}
    assert not long, f"over 500 lines: {long}"
    ignores = [
        (_module(p), line)
        for p in PACKAGE.rglob("*.py")
        for line in p.read_text().splitlines()
        if "type: ignore" in line
    ]
    assert len(ignores) <= 5, ignores
    for module, line in ignores:
        assert re.search(r"type: ignore\[[a-z-]+\]  # \S", line), f"{module}: {line.strip()}"
