"""Schemas: the named types of a context (Vectros' `list_schemas`), and the rules every typed payload keeps.

A schema is one `schema` record per type name in a context: a JSON Schema (Draft 2020-12) for the
payload, a surface (`record`, `document` or `identity`), the lookup fields (top-level payload fields of
type string, number or integer, each with the ways it may be looked up: exact, range, prefix) and the
default `indexMode` of its records. The management principal registers them (`schemas_create`, CLI
`engram schemas create`); every caller of the context reads them, as a database's callers read its
tables' definitions. Registering a type again replaces its definition (a new version); what was written
under the old one keeps its payload and the version it was checked against.

A schema is data (`engram.families.records.schema_rules`): references resolve only inside it, patterns run on a
linear-time engine, the work a value may cost is bounded, and nothing is ever fetched. Payloads are validated
with `jsonschema-rs`; a failure names the failing path (`payload.items[2].qty: -1 is less than the minimum of
0`) of the first error found.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from typing import Any, Literal

from engram.families.records import schema_rules
from engram.kernel.caller import Caller
from engram.kernel.clock import iso
from engram.kernel.errors import Conflict, InvalidInput, NotFound
from engram.kernel.ports import Item, Write, scan
from engram.kernel.retry import on_conflict
from engram.kernel.scan import every
from engram.kernel.scopes import can_see
from engram.kernel.services import BaseService

KIND = "schema"
Surface = Literal["record", "document", "identity"]
IndexMode = Literal["none", "keyword", "hybrid"]
LookupOp = Literal["exact", "range", "prefix"]
PrincipalType = Literal["user", "org", "client"]
TYPE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
MAX_SCHEMA_BYTES = 64 * 1024
MAX_PAYLOAD_BYTES = 64 * 1024  # a payload as JSON (a version of it is kept per write)
MAX_LOOKUP_VALUE = 512  # characters of a string a lookup key holds
MAX_LOOKUP_FIELDS = 10
_LOOKUP_TYPES = {"string": "string", "number": "number", "integer": "number"}


@dataclass(frozen=True)
class Lookup:
    field: str
    ops: tuple[LookupOp, ...]
    kind: Literal["string", "number"]


@dataclass(frozen=True)
class Schema:
    type: str
    surface: Surface
    json_schema: dict[str, Any]
    lookups: tuple[Lookup, ...]
    index_mode: IndexMode
    version: int
    principal_type: PrincipalType | None = None
    description: str = ""

    def lookup(self, field: str, op: LookupOp) -> Lookup:
        found = next((lk for lk in self.lookups if lk.field == field), None)
        if found is None:
            fields = ", ".join(lk.field for lk in self.lookups) or "none"
            raise InvalidInput(
                f"{field!r} is not a lookup field of type {self.type!r} (lookup fields: {fields})",
                code="not_a_lookup_field",
            )
        if op not in found.ops:
            raise InvalidInput(
                f"lookup field {field!r} of type {self.type!r} takes {', '.join(found.ops)}, not {op}",
                code="lookup_not_allowed",
            )
        return found

    def public(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "surface": self.surface,
            "description": self.description,
            "jsonSchema": self.json_schema,
            "lookupFields": [{"field": lk.field, "ops": list(lk.ops), "valueType": lk.kind} for lk in self.lookups],
            "indexMode": self.index_mode,
            "principalType": self.principal_type,
            "version": self.version,
        }

    def validate(self, payload: Any) -> None:
        """Refuse a payload that fails the schema, naming the failing path (`engram.families.records.schema_rules`:
        offline, linear-time patterns, bounded work, the first error)."""
        size = len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())
        if size > MAX_PAYLOAD_BYTES:
            raise InvalidInput(
                f"payload is {size} bytes as JSON; the limit is {MAX_PAYLOAD_BYTES}", code="payload_too_large"
            )
        try:
            compiled = schema_rules.validator(self.json_schema, cache=True)
        except InvalidInput as exc:  # registered before these rules: it must be registered again
            raise InvalidInput(
                f"type {self.type!r} has a schema Engram no longer takes ({exc.message}); register it again",
                code="schema_invalid",
            ) from None
        error = schema_rules.first_error(compiled, payload)
        if error is not None:
            where, message = error
            raise InvalidInput(
                f"{where}: {message} (type {self.type!r})", code="schema_violation", details={"path": where}
            )
        for lk in self.lookups:
            value = payload.get(lk.field) if isinstance(payload, dict) else None
            if isinstance(value, str) and len(value) > MAX_LOOKUP_VALUE:
                raise InvalidInput(
                    f"payload.{lk.field}: a lookup field holds at most {MAX_LOOKUP_VALUE} characters",
                    code="schema_violation",
                    details={"path": f"payload.{lk.field}"},
                )


def _of(item: Item) -> Schema:
    d = item.data
    return Schema(
        d["type"],
        d["surface"],
        d["json_schema"],
        tuple(Lookup(lk["field"], tuple(lk["ops"]), lk["kind"]) for lk in d["lookups"]),
        d["index_mode"],
        item.version,
        d.get("principal_type"),
        d.get("description", ""),
    )


def sortable(value: Any, kind: Literal["string", "number"]) -> str | None:
    """A lookup value as text whose order is the value's order (strings as they are; numbers as the
    bits of a float64 made to sort as unsigned, in hex): what a key range needs. None for a value of
    another type (the field is absent, or null)."""
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        bits = struct.unpack(">Q", struct.pack(">d", float(value)))[0]
        bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | 1 << 63
        return f"{bits:016x}"
    return value if isinstance(value, str) else None


class SchemaService(BaseService):
    def create(
        self,
        context_id: str,
        actor: str,
        type_: str,
        surface: Surface,
        json_schema: dict[str, Any],
        lookup_fields: list[dict[str, Any]],
        index_mode: IndexMode,
        principal_type: PrincipalType | None,
        description: str,
        caller: Caller | None = None,
    ) -> dict[str, Any]:
        """Register a type, or replace it: a key (`caller`) replaces one only when it sees every object of that
        type (409 `in_use` otherwise, saying nothing of them); the CLI, run by the operator, any."""
        if not TYPE_NAME.match(type_):
            raise InvalidInput("type must start with a letter: letters, digits, _ . - (at most 64)")
        if len(json.dumps(json_schema).encode()) > MAX_SCHEMA_BYTES:
            raise InvalidInput(f"jsonSchema is over {MAX_SCHEMA_BYTES} bytes", code="payload_too_large")
        schema_rules.check(json_schema)
        if json_schema.get("type", "object") != "object":
            raise InvalidInput("jsonSchema must describe an object (a payload is a JSON object)")
        if (surface == "identity") != (principal_type is not None):
            raise InvalidInput("principalType is given for, and only for, an identity schema")
        if len(lookup_fields) > MAX_LOOKUP_FIELDS:
            raise InvalidInput(f"at most {MAX_LOOKUP_FIELDS} lookup fields")
        props = json_schema.get("properties") or {}
        lookups = []
        for spec in lookup_fields:
            name, ops = spec["field"], list(dict.fromkeys(spec.get("ops") or ["exact"]))
            declared = props.get(name) if isinstance(props, dict) else None
            kind = _LOOKUP_TYPES.get(str(declared.get("type"))) if isinstance(declared, dict) else None
            if kind is None:
                raise InvalidInput(
                    f"lookup field {name!r} must be a property of jsonSchema of type string, number or integer"
                )
            if "prefix" in ops and kind != "string":
                raise InvalidInput(f"lookup field {name!r}: prefix lookups take a string field")
            lookups.append({"field": name, "ops": ops, "kind": kind})
        if len({lk["field"] for lk in lookups}) != len(lookups):
            raise InvalidInput("a lookup field is named twice")
        data = {
            "type": type_,
            "surface": surface,
            "json_schema": json_schema,
            "lookups": lookups,
            "index_mode": index_mode,
            "principal_type": principal_type,
            "description": description,
            "registered_at": iso(self.clock.now()),
        }

        def attempt() -> Item:
            current = self.records.get(context_id, KIND, type_)
            if current is not None and current.data["surface"] != surface:
                raise InvalidInput(f"type {type_!r} is a {current.data['surface']} schema; its surface stays")
            if current is not None and caller is not None and self._unseen_use(caller, type_, surface):
                raise Conflict(f"type {type_!r} is in use; it cannot be replaced with this key", code="in_use")
            at = current.version if current is not None else 0
            write = Write(context_id, KIND, type_, data, actor, expected_version=at)
            return self.records.transact([write], self.clock.now())[0]

        return _of(on_conflict(attempt)).public()

    def _unseen_use(self, caller: Caller, type_: str, surface: Surface) -> bool:
        """Whether objects of the type exist that the caller does not see: replacing the schema would change how
        another scope's writes are checked and looked up (a key that governs the whole context sees them all)."""
        if self.identity.governs(caller, None):
            return False
        lens = self.identity.read_lens(caller, None)
        kind, field = ("document", "schema_id") if surface == "document" else ("record", "type")
        return any(
            item.data.get(field) == type_ and not can_see(item.data.get("scopes"), lens)
            for item in every(self.records, caller.context_id, kind)
        )

    def get(self, context_id: str, type_: str) -> Schema:
        item = self.records.get(context_id, KIND, type_) if TYPE_NAME.match(type_) else None
        if item is None:
            raise NotFound(f"no schema {type_!r} (list_schemas names the types)", code="unknown_schema")
        return _of(item)

    def find(self, context_id: str, type_: str) -> Schema | None:
        item = self.records.get(context_id, KIND, type_) if TYPE_NAME.match(type_) else None
        return _of(item) if item is not None else None

    def all(self, context_id: str, surface: Surface | None = None, type_: str | None = None) -> list[Schema]:
        if type_ is not None:
            found = self.find(context_id, type_)
            return [found] if found is not None and surface in (None, found.surface) else []
        return [s for s in (_of(i) for i in scan(self.records, context_id, KIND)) if surface in (None, s.surface)]

    def catalog(self, caller: Caller, surface: Surface | None = None, type_: str | None = None) -> dict[str, Any]:
        return {"schemas": [s.public() for s in self.all(caller.context_id, surface, type_)]}
