"""The JSON schemas an operation's models are shown as, to MCP clients (`tools/list`) and in REST's OpenAPI:
compact (no titles, no null branches) and, for `tools/list`, without what only the server needs. One place for
both transports (`engram.api.mcp`, `engram.api.rest`)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

# Validation keywords the server enforces but a model needs no tokens for (lengths, counts, patterns):
# they stay in the schema the server validates with, not in the one tools/list advertises.
_ENFORCED_ONLY = frozenset({"maxLength", "minLength", "maxItems", "minItems", "pattern", "minimum"})


def compact(node: Any, nullable: bool = False) -> Any:
    """A smaller JSON schema with the same meaning for clients: no titles, no `default: null`, and
    `anyOf [X, null]` written as X (an optional argument is simply omitted). tools/list is read into
    the model's context window, so its size is a cost."""
    if isinstance(node, list):
        return [compact(v, nullable) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: compact(v, nullable) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    if nullable:  # output schemas: clients validate results against them, and results do hold nulls
        return out
    if out.get("default", 0) is None:
        del out["default"]
    options = out.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options:
        rest = [o for o in options if o != {"type": "null"}]
        del out["anyOf"]
        if len(rest) == 1:
            out = {**rest[0], **out}
        else:
            out["anyOf"] = rest
    return out


def schema(model: type[BaseModel], output: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = compact(model.model_json_schema(by_alias=True), nullable=output)
    return out


def advertised(node: Any) -> Any:
    """The input schema as tools/list shows it: without what only the server needs (`_ENFORCED_ONLY`,
    `additionalProperties` true or false: unknown arguments are refused all the same), a `$defs` entry used
    once written in place, and without `context_id`'s description (the server's instructions say it once
    for every tool)."""
    if isinstance(node, dict) and isinstance(node.get("$defs"), dict):
        node = _inline_single_use(node)
    if isinstance(node, list):
        return [advertised(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {
        k: advertised(v)
        for k, v in node.items()
        if k not in _ENFORCED_ONLY and not (k == "additionalProperties" and (isinstance(v, bool) or v == {}))
    }
    options = out.get("anyOf")
    if isinstance(options, list) and _one_of_each_type(options):
        # a union of types is one `type` list (JSON Schema), at half the tokens; what a branch says of its own
        # type alone (an array's `items`, an object's `properties`) applies to values of that type only
        del out["anyOf"]
        kinds = [o["type"] for o in options]
        out["type"] = [k for k in kinds if not (k == "integer" and "number" in kinds)]  # number has them
        for o in options:
            out.update({k: v for k, v in o.items() if k != "type"})
    if "default" in out and (out["default"] is False or out["default"] in ("", [], {})):
        del out["default"]  # an argument left out is false or empty unless a default says otherwise (INSTRUCTIONS)
    props = out.get("properties")
    if isinstance(props, dict) and isinstance(props.get("context_id"), dict):
        props["context_id"] = {"type": "string"}
    return out


# The keywords that apply to values of one type only (JSON Schema's applicators by instance type)
_OF_TYPE = {"array": {"items"}, "object": {"properties", "additionalProperties", "required"}}


def _one_of_each_type(options: list[Any]) -> bool:
    """Whether a union's branches are each one type (no two alike) saying nothing but what applies to their
    own type: then it means the same as one schema with a `type` list."""
    if not all(isinstance(o, dict) and isinstance(o.get("type"), str) for o in options):
        return False
    kinds = [o["type"] for o in options]
    return len(set(kinds)) == len(kinds) and all(set(o) - {"type"} <= _OF_TYPE.get(o["type"], set()) for o in options)


def _inline_single_use(root: dict[str, Any]) -> dict[str, Any]:
    """`root` with each `$defs` entry that is referred to once written where it is referred to."""
    text = json.dumps(root)
    defs = dict(root["$defs"])
    once = {name for name in defs if text.count(f'"#/$defs/{name}"') == 1}

    def put(node: Any) -> Any:
        if isinstance(node, list):
            return [put(v) for v in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in once:
            return put({**defs[ref[8:]], **{k: v for k, v in node.items() if k != "$ref"}})
        return {k: put(v) for k, v in node.items()}

    out = put({k: v for k, v in root.items() if k != "$defs"})
    kept = {name: put(d) for name, d in defs.items() if name not in once}
    return {**out, "$defs": kept} if kept else out
