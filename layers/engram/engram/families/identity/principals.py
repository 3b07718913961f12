"""Principals (Vectros' `lookup_principal`): a user, org or client named by the caller's own id, resolved to
the id the ownership filters take — a scope path.

Two sources, both read-only here:
- registered scope paths: `org/acme/user/u-123` is the user `u-123` (the segment before an id says what it
  is: `user`, `org` or `client`), so `externalId: "u-123"` finds it;
- records of an identity schema (surface `identity`, with a `principalType`): a record names the principal
  whose scope path it is written under, and is found by its externalId or by any of its schema's lookup
  fields (`type` + `field` + `value`: a user by email).

A caller resolves only principals related to its grant (its own path, those below it, the orgs above it):
another user's id answers the same 404 as an id nobody registered.
"""

from __future__ import annotations

from typing import Any

from engram.families.records.schemas import SchemaService
from engram.families.records.service import RecordService
from engram.kernel.caller import Caller
from engram.kernel.errors import InvalidInput, NotFound
from engram.kernel.ports import Item
from engram.kernel.scopes import related
from engram.trust.identity import IdentityService

PRINCIPAL_TYPES = ("user", "org", "client")


def _kind_of(path: str) -> tuple[str, str] | None:
    """(type, id) of a scope path that names a principal: `.../user/<id>`, `.../org/<id>`, `.../client/<id>`."""
    parts = path.split("/")
    if len(parts) >= 2 and parts[-2] in PRINCIPAL_TYPES:
        return parts[-2], parts[-1]
    return None


class Principals:
    def __init__(self, identity: IdentityService, schemas: SchemaService, typed: RecordService) -> None:
        self.identity, self.schemas, self.typed = identity, schemas, typed

    def _related(self, caller: Caller, path: str) -> bool:
        return any(related(path, g) for g in caller.principal.grant)

    def _from_record(self, item: Item) -> dict[str, Any] | None:
        schema = self.schemas.find(item.context_id, item.data["type"])
        paths = item.data.get("scopes") or []
        if schema is None or not paths:
            return None
        path = paths[0]
        return {
            "id": path,
            "type": schema.principal_type,
            "externalId": item.data.get("external_id"),
            "path": path,
            "record": self.typed.public(item),
        }

    def lookup(
        self, caller: Caller, external_id: str | None, type_: str | None, field: str | None, value: Any
    ) -> dict[str, Any]:
        wanted = type_ if type_ in PRINCIPAL_TYPES else None
        identity_types = [
            s for s in self.schemas.all(caller.context_id, "identity") if wanted in (None, s.principal_type)
        ]
        if type_ is not None and wanted is None:  # an identity schema by name
            schema = self.schemas.get(caller.context_id, type_)
            if schema.surface != "identity":
                raise InvalidInput(f"type {type_!r} is a {schema.surface} schema, not an identity type")
            identity_types = [schema]
        found: list[dict[str, Any]] = []
        if field is not None:
            if type_ is None or wanted is not None:
                raise InvalidInput("a lookup by field names the identity schema (type) it belongs to")
            items = self.typed.identities(caller, field, value, identity_types)
        else:
            assert external_id is not None
            items = self.typed.identities(caller, "externalId", external_id, identity_types)
            for path in self.identity.registered(caller.context_id):
                named = _kind_of(path)
                if named and named[1] == external_id and wanted in (None, named[0]):
                    found.append(
                        {"id": path, "type": named[0], "externalId": external_id, "path": path, "record": None}
                    )
        found += [p for p in (self._from_record(i) for i in items) if p is not None]
        found = [p for p in found if self._related(caller, p["path"])]
        if not found:
            what = f"{field} = {value!r}" if field is not None else f"externalId {external_id!r}"
            raise NotFound(f"no principal with {what}", code="principal_not_found")
        unique = list({p["id"]: p for p in found}.values())
        return {**unique[0], "matches": len(unique)}
