"""Each Lambda function with only its layers: template.yaml says which layers a function carries, and
`import_function` imports its handler in a fresh interpreter where every locked dependency outside those
layers cannot be imported (as on Lambda, where it is not there). Given a `sam build` directory, a module
of a locked dependency imports only if the function's built layers have it (what the layer Makefiles
prune is then gone too). bench/coldstart.py times the same import."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.aws_lambda.apigw import ROOT, template

sys.path.insert(0, str(ROOT / "infra"))
from layer_requirements import missing_modules

PROBE = """
import importlib.util, json, sys, time
from pathlib import Path
rules = json.loads(sys.argv[2])
absent, watched, roots = set(rules["absent"]), set(rules["watched"]), [Path(r) for r in rules["roots"]]

def built(name):
    parts = name.split(".")
    for root in roots:
        base = root.joinpath(*parts)
        if base.is_dir() or base.with_name(parts[-1] + ".py").exists() or base.with_name(parts[-1] + ".pyc").exists():
            return True
        if list(base.parent.glob(parts[-1] + ".*.so")):
            return True
    return False

class NotInLayers:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in absent or (name in watched and not built(name)):
            raise ModuleNotFoundError(f"No module named {name!r} (not in this function's layers)", name=name)
        return None

sys.meta_path.insert(0, NotInLayers())
t0 = time.perf_counter()
import engram.api.lambda_runtime
t1 = time.perf_counter()
spec = importlib.util.spec_from_file_location("app", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
t2 = time.perf_counter()
print(json.dumps({"total": (t2 - t0) * 1000, "libraries": (t1 - t0) * 1000, "build": (t2 - t1) * 1000}))
"""
ENV = {  # the template's environment, pointed nowhere: building adapters makes no request
    "ENGRAM_BACKEND": "aws",
    "ENGRAM_TABLE": "t",
    "ENGRAM_BUCKET": "b",
    "ENGRAM_QUEUE_URL": "http://127.0.0.1:9/123456789012/jobs",
    "ENGRAM_OPENSEARCH_URL": "http://127.0.0.1:9",
    "ENGRAM_OPENSEARCH_SERVICE": "none",
    "ENGRAM_FAMILY_FUNCTIONS": json.dumps({"memory": "m", "knowledge": "k", "identity": "i"}),
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    "AWS_ACCESS_KEY_ID": "x",
    "AWS_SECRET_ACCESS_KEY": "x",
    "AWS_DEFAULT_REGION": "us-east-1",
    "POWERTOOLS_TRACE_DISABLED": "true",
}


def function_layers() -> dict[str, list[str]]:
    """function (authorizer, gateway, ...) -> its layers' logical ids, as template.yaml gives them (with
    the local model: a conditional layer counts)."""
    resources = template()["Resources"]

    def names(value: Any) -> list[str]:
        if isinstance(value, list):
            return [n for v in value for n in names(v)]
        is_layer = isinstance(value, str) and resources.get(value, {}).get("Type") == "AWS::Serverless::LayerVersion"
        return [value] if is_layer else []

    return {
        name.removesuffix("Function").lower(): names(res["Properties"].get("Layers", []))
        for name, res in resources.items()
        if res["Type"] == "AWS::Serverless::Function"
    }


def function_environment(function: str) -> dict[str, str]:
    """The function's environment as template.yaml sets it (Globals, then its own), the endpoints pointed
    nowhere (ENV): a condition takes its first branch (the local model, a domain), a parameter its default."""
    loaded = template()
    parameters = loaded.get("Parameters", {})
    own = loaded["Resources"][function.capitalize() + "Function"]["Properties"].get("Environment", {})
    variables = {**loaded["Globals"]["Function"]["Environment"]["Variables"], **own.get("Variables", {})}

    def value(v: Any) -> Any:
        if isinstance(v, list):  # !If [condition, then, else]
            return value(v[1])
        if isinstance(v, str) and v in parameters:  # !Ref Parameter
            return str(parameters[v].get("Default", ""))
        if isinstance(v, str) and (v.startswith("AWS::") or v in loaded["Resources"]):  # made at deploy time
            return None
        return v

    env = {k: value(v) for k, v in variables.items() if k not in ENV}
    return {**{k: v for k, v in env.items() if isinstance(v, str)}, **ENV}


@functools.cache
def _module_files() -> frozenset[str]:
    """Dotted names of the modules the locked dependencies have as files here, for those whose Lambda
    build is the same version (numpy, for one, is locked at another version for CPython 3.13)."""
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    same_version = missing_modules(set()) - _version_split()
    names: set[str] = set()
    for top in same_version:
        base = site / top
        files = base.rglob("*") if base.is_dir() else site.glob(top + ".*")
        for f in files:
            if f.suffix in (".py", ".so") and "__pycache__" not in f.parts and f.is_file():
                parts = list(f.relative_to(site).with_suffix("").parts)
                parts[-1] = parts[-1].split(".")[0]  # name.cpython-311-x86_64-linux-gnu -> name
                if parts[-1] == "__init__":
                    parts.pop()
                names.add(".".join(parts))
    return frozenset(names)


def _version_split() -> set[str]:
    """Modules of the dependencies locked at one version per Python (numpy: another release on Lambda)."""
    from collections import Counter
    from importlib.metadata import packages_distributions

    lines = [ln for f in (ROOT / "layers").glob("*/requirements.txt") for ln in f.read_text().splitlines()]
    counts = Counter(ln.split("==")[0].strip().lower() for ln in lines if "==" in ln and not ln.startswith("#"))
    split = {name for name, n in counts.items() if n > 1}
    return {m for m, dists in packages_distributions().items() if any(d.lower() in split for d in dists)}


def import_function(function: str, build: Path | None = None) -> dict[str, float]:
    """Import functions/<function>/app.py in a fresh interpreter with only its layers' packages (and,
    with `build`, only the modules its built layers have): milliseconds in total, for the libraries and
    for building the adapters. Raises with the interpreter's error when an import reaches outside."""
    layers = function_layers()[function]
    carried = {layer.removesuffix("Layer").lower() for layer in layers}
    rules = {
        "absent": sorted(missing_modules(carried)),
        "watched": sorted(_module_files()) if build else [],
        "roots": [str(build / layer / "python") for layer in layers] if build else [],
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT / "functions" / function / "app.py"), json.dumps(rules)],
        env={**os.environ, **function_environment(function)},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise ImportError(f"functions/{function}/app.py with {sorted(carried)}: {done.stderr[-2000:]}")
    timings: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return timings
