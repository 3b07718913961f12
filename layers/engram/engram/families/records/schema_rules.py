"""JSON Schemas as data: what a registered schema may hold, and the validator that checks payloads against it.

A tenant's management key registers schemas; every agent's payload is then checked against them. So a schema
is hostile input too, and these rules keep it data:

- **No reaching out.** `$ref` and `$dynamicRef` resolve only inside the schema (`#/json/pointer` or `#anchor`);
  `$id` only names the root, and `$schema`, if given, is Draft 2020-12's. A reference that leaves the schema,
  or points at nothing, is refused at registration (400 naming it). The validator is built offline with a
  retriever that refuses every URI as well, so no stored schema can make validation open a file or a socket.
- **Linear-time patterns.** `pattern` and `patternProperties` run on Rust's `regex` engine (finite automata, no
  backtracking: `jsonschema-rs` with `RegexOptions`); a pattern that engine cannot compile (backreferences,
  lookaround) is refused at registration.
- **Bounded work.** The work one value can cost is bounded at registration: along any path into a payload,
  the subschemas that apply (in place: `allOf`/`anyOf`/`oneOf`/`not`/`if`/`$ref` ...; one level down:
  `properties`, `items` ...) add up to at most MAX_CHAIN_COST, references unfolded. A `$ref` loop that never
  descends into the value is refused. With payloads bounded (`engram.kernel.limits`), a validation costs at most a
  few milliseconds whatever the schema.
- Validation stops at the first error (a schema cannot make a payload produce millions of them).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

from engram.kernel.errors import InvalidInput

DRAFT_2020_12 = ("https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2020-12/schema#")
MAX_CHAIN_COST = 256
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")
_DOWN_ONE = ("additionalProperties", "unevaluatedProperties", "items", "contains", "unevaluatedItems",
             "propertyNames", "contentSchema")  # fmt: skip
_REFS = ("$ref", "$dynamicRef", "$recursiveRef")


def _subschemas(node: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(location, subschema) of every schema `node` holds directly (not the values of `enum`, `const`, ...)."""
    for kw in (*_IN_PLACE_LISTS, "prefixItems"):
        if isinstance(node.get(kw), list):
            yield from ((f"{kw}[{i}]", s) for i, s in enumerate(node[kw]))
    for kw in (*_IN_PLACE_ONE, *_DOWN_ONE):
        if kw in node and not (kw == "items" and isinstance(node[kw], list)):
            yield kw, node[kw]
    for kw in ("properties", "patternProperties", "dependentSchemas", "$defs", "definitions"):
        if isinstance(node.get(kw), dict):
            yield from ((f"{kw}.{k}", s) for k, s in node[kw].items())


def _walk(root: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    stack: list[tuple[str, Any]] = [("jsonSchema", root)]
    while stack:
        at, node = stack.pop()
        if isinstance(node, dict):
            yield at, node
            stack.extend((f"{at}.{kw}", sub) for kw, sub in _subschemas(node))


def _pointer(root: Any, fragment: str) -> Any:
    """The node a JSON pointer fragment (`/$defs/a`) names, or a KeyError."""
    node = root
    for raw in fragment.split("/")[1:]:
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise KeyError(fragment)
    return node


class Targets:
    """Where each local reference of one schema leads."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.anchors: dict[str, list[Any]] = {}
        for _, node in _walk(root):
            for kw in ("$anchor", "$dynamicAnchor"):
                if isinstance(node.get(kw), str):
                    self.anchors.setdefault(node[kw], []).append(node)

    def of(self, ref: str, at: str) -> list[Any]:
        if not ref.startswith("#"):
            raise InvalidInput(
                f"{at}: {ref!r} refers outside the schema; references resolve only inside it ('#/$defs/...')",
                code="schema_reference",
                details={"path": at},
            )
        fragment = ref[1:]
        if fragment == "" or fragment.startswith("/"):
            try:
                return [_pointer(self.root, fragment)]
            except KeyError:
                pass
        elif fragment in self.anchors:
            return self.anchors[fragment]
        raise InvalidInput(
            f"{at}: {ref!r} points at nothing in the schema", code="schema_reference", details={"path": at}
        )


def check(schema: dict[str, Any]) -> None:
    """Refuse a schema that reaches outside itself, cannot be compiled with linear-time patterns, or could cost
    unbounded work (see the module's docstring). InvalidInput names where."""
    schema_uri = schema.get("$schema")
    if schema_uri is not None and schema_uri not in DRAFT_2020_12:
        raise InvalidInput(f"jsonSchema.$schema: Engram takes Draft 2020-12 ({DRAFT_2020_12[0]}), not {schema_uri!r}")
    targets = Targets(schema)
    for at, node in _walk(schema):
        if node is not schema and ("$id" in node or "$schema" in node):
            raise InvalidInput(
                f"{at}: $id and $schema name only the root (an embedded resource could point elsewhere)",
                code="schema_reference",
                details={"path": at},
            )
        for kw in _REFS:
            if kw in node:
                if not isinstance(node[kw], str):
                    raise InvalidInput(f"{at}.{kw} must be a string", details={"path": f"{at}.{kw}"})
                targets.of(node[kw], f"{at}.{kw}")
    cost = chain_cost(schema, targets)
    if cost > MAX_CHAIN_COST:
        raise InvalidInput(
            f"jsonSchema is too complex: one value may meet {cost} subschemas (references unfolded); the limit is "
            f"{MAX_CHAIN_COST}",
            code="schema_too_complex",
        )
    validator(schema)  # the meta-schema, and every pattern on the linear-time engine


def chain_cost(schema: Any, targets: Targets, depth: int = 32) -> int:
    """The most subschemas that apply along one path into a value `depth` levels deep (at most one more than
    MAX_CHAIN_COST is ever counted). A `$ref` loop that stays on the same value is refused."""
    memo: dict[tuple[int, int], int] = {}
    open_: set[tuple[int, int]] = set()

    def cost(node: Any, d: int) -> int:
        if not isinstance(node, dict):
            return 1
        key = (id(node), d)
        if key in memo:
            return memo[key]
        if key in open_:
            raise InvalidInput(
                "jsonSchema refers to itself without descending into the value (a $ref loop)",
                code="schema_too_complex",
            )
        open_.add(key)
        total = 1
        for kw in _IN_PLACE_LISTS:
            total += sum(cost(s, d) for s in node.get(kw) or [] if isinstance(node.get(kw), list))
        total += sum(cost(node[kw], d) for kw in _IN_PLACE_ONE if kw in node)
        dependent = node.get("dependentSchemas")
        total += sum(cost(s, d) for s in dependent.values()) if isinstance(dependent, dict) else 0
        for kw in _REFS:
            if isinstance(node.get(kw), str):
                total += sum(cost(t, d) for t in targets.of(node[kw], kw))
        if d > 0 and total <= MAX_CHAIN_COST:
            props, patterns, prefix = node.get("properties"), node.get("patternProperties"), node.get("prefixItems")
            # one path takes one property name, one array position: the dearest, plus all that may also apply
            total += max((cost(s, d - 1) for s in props.values()), default=0) if isinstance(props, dict) else 0
            total += sum(cost(s, d - 1) for s in patterns.values()) if isinstance(patterns, dict) else 0
            total += max((cost(s, d - 1) for s in prefix), default=0) if isinstance(prefix, list) else 0
            total += sum(cost(node[kw], d - 1) for kw in _DOWN_ONE if kw in node and isinstance(node[kw], dict))
        total = min(total, MAX_CHAIN_COST + 1)
        open_.discard(key)
        memo[key] = total
        return total

    try:
        return cost(schema, depth)
    except RecursionError:
        return MAX_CHAIN_COST + 1


def _refuse(uri: str) -> Any:
    raise ValueError(f"{uri}: schemas resolve references only inside themselves")


_CACHE: dict[str, Any] = {}
_LOCK = threading.Lock()


def validator(schema: dict[str, Any], cache: bool = False) -> Any:
    """A validator for `schema`, offline, with linear-time patterns (with `cache`, compiled once per distinct
    schema in this process). InvalidInput when the schema is not valid Draft 2020-12 or a pattern does not
    compile."""
    import jsonschema_rs

    key = hashlib.blake2b(json.dumps(schema, sort_keys=True).encode(), digest_size=16).hexdigest() if cache else None
    if key is not None and key in _CACHE:
        return _CACHE[key]
    try:
        jsonschema_rs.meta.validate(schema)
        built = jsonschema_rs.Draft202012Validator(
            schema,
            retriever=_refuse,
            pattern_options=jsonschema_rs.RegexOptions(),
            validate_formats=False,
        )
    except jsonschema_rs.ValidationError as exc:
        where = "/".join(str(p) for p in exc.instance_path) or "(root)"
        raise InvalidInput(f"jsonSchema is not a valid JSON Schema at {where}: {exc.message}") from None
    except (jsonschema_rs.ReferencingError, ValueError) as exc:
        raise InvalidInput(f"jsonSchema: {str(exc).splitlines()[0]}", code="schema_reference") from None
    if key is not None:
        with _LOCK:
            if len(_CACHE) > 1024:
                _CACHE.clear()
            _CACHE[key] = built
    return built


def first_error(compiled: Any, payload: Any) -> tuple[str, str] | None:
    """(path, message) of the first way `payload` fails, or None. Stops at that one."""
    import jsonschema_rs

    try:
        compiled.validate(payload)
    except jsonschema_rs.ValidationError as exc:
        where = "payload" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.instance_path)
        return where, exc.message
    return None
