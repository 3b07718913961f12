"""Tool schemas generated from the registry: valid, compact, and faithful to the input models."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from engram.api.mcp import build_server, tool_of
from engram.api.schemas import compact, schema
from engram.families import select
from engram.settings import Settings
from engram.wiring import build_local


def test_compact_drops_titles_null_defaults_and_null_branches() -> None:
    raw = {"title": "M", "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None,
                                              "description": "d", "title": "A"},
                                        "title": {"type": "string", "title": "Title"}}}  # fmt: skip
    assert compact(raw) == {"properties": {"a": {"type": "string", "description": "d"},
                                           "title": {"type": "string"}}}  # fmt: skip


@pytest.mark.parametrize("op", select(), ids=lambda o: o.name)
def test_every_tool_schema_accepts_what_the_model_accepts(op: object) -> None:
    tool = tool_of(op)  # type: ignore[arg-type]
    text = json.dumps(tool.input_schema)
    assert '"type": "null"' not in text and '"title": "' not in text
    assert tool.input_schema["type"] == "object"
    assert '"additionalProperties": false' not in text and '"additionalProperties": true' not in text  # lean
    assert schema(op.input)["additionalProperties"] is False  # type: ignore[attr-defined]  # enforced: unknown args refused
    assert len(tool.description or "") <= 100  # short: tools/list is read into the model's context


def test_mcp_caps_are_advertised() -> None:
    hybrid = next(tool_of(o) for o in select() if o.name == "hybrid_search")
    assert hybrid.input_schema["properties"]["limit"] == {"default": 3, "maximum": 10, "type": "integer"}


def test_the_catalogue_leaves_out_what_only_the_server_needs() -> None:
    """Lengths, counts, patterns and lower bounds are enforced, not advertised; output schemas only on
    request (ENGRAM_MCP_OUTPUT_SCHEMAS). The server still validates with the full input schema."""
    store = next(o for o in select() if o.name == "memory_store")
    lean = json.dumps(tool_of(store, output_schemas=False).model_dump(by_alias=True, exclude_none=True))
    for keyword in ("maxLength", "minLength", "maxItems", "minItems", '"pattern"', "minimum", "outputSchema"):
        assert keyword not in lean, keyword
    assert "maxLength" in json.dumps(schema(store.input))  # what the server validates with
    assert tool_of(store, output_schemas=True).output_schema is not None


def test_output_schemas_keep_nullable_fields() -> None:
    store = next(tool_of(o) for o in select() if o.name == "memory_store")
    assert store.output_schema is not None
    previous = store.output_schema["$defs"]["AttributeOut"]["properties"]["previous"]
    assert {"type": "null"} in previous["anyOf"]  # clients validate results that hold null here


def _untyped(node: object, path: str = "") -> list[str]:
    """Where a schema leaves a value's type open (MCP Inspector --strict warns on those)."""
    out: list[str] = []
    if isinstance(node, dict):
        props = node.get("properties")
        if isinstance(props, dict):
            for name, prop in props.items():
                if isinstance(prop, dict) and not (
                    {"type", "anyOf", "oneOf", "allOf", "$ref", "enum", "const"} & set(prop)
                ):
                    out.append(f"{path}.{name}")
        for key, value in node.items():
            out += _untyped(value, f"{path}.{key}" if key != "properties" else path)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _untyped(value, f"{path}[{i}]")
    return out


@pytest.mark.parametrize("op", select(), ids=lambda o: o.name)
def test_every_argument_has_a_type(op: object) -> None:
    assert _untyped(tool_of(op).input_schema) == []  # type: ignore[arg-type]


def test_a_definition_used_once_is_written_in_place() -> None:
    bulk = next(tool_of(o) for o in select() if o.name == "knowledge_bulk_ingest")
    assert "$defs" not in bulk.input_schema and "$ref" not in json.dumps(bulk.input_schema)
    assert bulk.input_schema["properties"]["documents"]["items"]["required"] == ["title", "content"]


def test_the_catalogue_writes_a_union_of_types_as_a_type_list_and_leaves_out_empty_defaults() -> None:
    from engram.api.schemas import advertised

    scalar_or_list = {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "number"},
                                {"type": "array", "items": {"type": "string"}}]}  # fmt: skip
    raw = {"type": "object", "properties": {
        "m": {"type": "object", "additionalProperties": scalar_or_list},
        "f": {"type": "boolean", "default": False}, "n": {"type": "integer", "default": 0},
        "l": {"type": "array", "items": {"type": "string"}, "default": []}, "s": {"type": "string", "default": "x"},
    }}  # fmt: skip
    props = advertised(raw)["properties"]
    # the same values are valid: `items` applies to arrays only
    assert props["m"]["additionalProperties"] == {"type": ["string", "number", "array"], "items": {"type": "string"}}
    assert "default" not in props["f"] and "default" not in props["l"]  # false / empty: left out (INSTRUCTIONS)
    assert props["n"]["default"] == 0 and props["s"]["default"] == "x"  # a default that says something stays
    # branches that say more than what applies to their own type, or two of one type, stay a union
    assert "anyOf" in advertised({"anyOf": [{"type": "string", "format": "date-time"}, {"type": "integer"}]})
    assert "anyOf" in advertised({"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "array"}]})


def test_the_server_starts_without_a_deprecation_warning(tmp_path: Path) -> None:
    """logging/setLevel is kept for clients of protocol versions before 2026-07-28; the SDK's warning about it
    is not printed at every start (it reached every `engram serve` and `engram stdio` user's terminal)."""
    engram = build_local(Settings(data_dir=tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        server = build_server(engram, select(None), lambda ctx: (None, None))  # type: ignore[arg-type,return-value]
    assert server.get_request_handler("logging/setLevel") is not None  # the capability is still served
