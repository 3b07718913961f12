"""MkDocs hook: the tool reference and the settings reference, generated from the code at every build, so the
manual cannot drift from it (issue #55). Each family's page lists its operations as declared
(`engram.kernel.operation.Operation`): the MCP tool and its seed aliases, the REST route(s), who may call it, whether it
writes, every argument with its type, default, limits and description (from the input model's JSON schema), and
the result's fields (from the output model). The settings page lists every `ENGRAM_*` variable from `Settings`; the
benchmarks page carries `bench/RESULTS.md`'s targets table as it is at build time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

from engram.families import NAMES, select
from engram.kernel.operation import AnyOperation
from engram.settings import Settings

LIMIT_KEYS = ("maxLength", "minLength", "maximum", "minimum", "maxItems", "minItems", "exclusiveMaximum", "pattern")


def _type(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " \\| ".join(_type(s, defs) for s in schema["anyOf"])
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}), defs)}"
    return str(kind)


def _limits(schema: dict[str, Any]) -> str:
    found = [f"{k} {schema[k]}" for k in LIMIT_KEYS if k in schema]
    for option in schema.get("anyOf", []):
        found += [f"{k} {option[k]}" for k in LIMIT_KEYS if k in option]
    return ", ".join(found)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def operation_section(op: AnyOperation) -> str:
    schema = op.input.model_json_schema()
    defs = schema.get("$defs", {})
    required = set(schema.get("required", []))
    lines = [f"## `{op.name}`", "", _cell(op.summary), ""]
    if op.aliases:
        lines.append(f"- **Also named**: {', '.join(f'`{a}`' for a in op.aliases)}")
    routes = [f"`{op.method} /api/v1/{{context_id}}{op.path}`", *(f"`{p}`" for p in op.also)]
    lines += [
        f"- **REST**: {', '.join(routes)}",
        f"- **Callers**: {', '.join(sorted(op.principals))}",
        f"- **Writes**: {'no' if op.read_only else 'yes'}",
        f"- **Errors over MCP**: {op.errors}",
        "",
        "| argument | type | default | limits | description |",
        "|---|---|---|---|---|",
    ]
    for name, prop in schema.get("properties", {}).items():
        default = "required" if name in required else json.dumps(prop.get("default"))
        lines.append(
            f"| `{name}` | {_cell(_type(prop, defs))} | {_cell(default)} | {_cell(_limits(prop))} "
            f"| {_cell(prop.get('description', ''))} |"
        )
    if op.output is None:
        lines += ["", "**Result**: text."]
    else:
        out = op.output.model_json_schema()
        fields = ", ".join(f"`{f}`" for f in out.get("properties", {}))
        lines += ["", f"**Result fields**: {fields or 'the service’s object'}."]
    return "\n".join(lines) + "\n"


def family_page(family: str) -> str:
    ops = select(family=family)
    head = [f"# The {family} family", "", f"{len(ops)} tools, each also a REST route (generated from the code).", ""]
    return "\n".join(head) + "\n".join(operation_section(op) for op in ops)


def settings_page() -> str:
    lines = [
        "# Settings",
        "",
        "Read once from the environment (generated from `engram.settings.Settings`).",
        "",
        "| variable | default | description |",
        "|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        default = field.default if field.default is not None else ""
        lines.append(f"| `ENGRAM_{name.upper()}` | `{_cell(default)}` | {_cell(field.description or '')} |")
    return "\n".join(lines) + "\n"


def targets_table() -> str:
    """The targets table at the top of `bench/RESULTS.md` (every figure an issue named, met or not), as it is."""
    results = (Path(__file__).resolve().parents[2] / "bench" / "RESULTS.md").read_text().split("\n")
    start = next(i for i, line in enumerate(results) if line.startswith("| issue | target"))
    end = next(i for i in range(start, len(results)) if not results[i].startswith("|"))
    return "\n".join(results[start:end]) + "\n"


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    return markdown.replace("<!-- targets -->", targets_table())


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for family in NAMES:
        if select(family=family):
            files.append(File.generated(config, f"reference/{family}.md", content=family_page(family)))
    files.append(File.generated(config, "reference/settings.md", content=settings_page()))
    return files
