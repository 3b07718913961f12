"""Records family: Vectros' typed records, schemas and version history (`record_*`, `list_schemas`,
`version_history`), and the management operation that registers a schema."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from engram.families.records import RecordsServices
from engram.families.records.schemas import IndexMode, LookupOp, PrincipalType, Surface
from engram.kernel.caller import ANY, MANAGEMENT, WRITERS, Caller
from engram.kernel.limits import Bounded
from engram.kernel.operation import Operation, Operations, OpInput, Passthrough, Scalar, Selector
from engram.kernel.ports import Progress

OPERATIONS = Operations()  # this module's operations, in declaration order (`engram.families.catalogue`)

TYPE = Field(..., min_length=1, max_length=64, description="A schema's type name (list_schemas)")
RECORD_ID = Field(..., min_length=1, max_length=64)
EXPECTED = Field(None, ge=1, description="fail unless the record is at this version")
Flat = Annotated[dict[str, Scalar], Bounded("metadata")]
Payload = Annotated[dict[str, JsonValue], Bounded("payload")]


Out = Passthrough


class RecordOut(Out):
    id: str
    type: str
    payload: dict[str, Any]
    version: int
    indexMode: IndexMode


# -- schemas -----------------------------------------------------------------------------------


class LookupFieldIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    field: str = Field(..., min_length=1, max_length=64)
    ops: list[LookupOp] = Field(["exact"], min_length=1, max_length=3)


class SchemaIn(OpInput):
    type: str = TYPE
    surface: Surface = "record"
    jsonSchema: Annotated[dict[str, JsonValue], Bounded("json_schema")] = Field(
        ..., description="JSON Schema (Draft 2020-12) of the payload"
    )
    lookupFields: list[LookupFieldIn] = Field([], max_length=10)
    indexMode: IndexMode = Field("hybrid", description="records' default: none / keyword / hybrid search")
    principalType: PrincipalType | None = Field(None, description="identity schemas: what a record names")
    description: str = Field("", max_length=1000)


def _schema_create(services: RecordsServices, caller: Caller, args: SchemaIn, progress: Progress) -> dict[str, Any]:
    return services.schemas.create(
        caller.context_id,
        caller.actor,
        args.type,
        args.surface,
        args.jsonSchema,
        [f.model_dump() for f in args.lookupFields],
        args.indexMode,
        args.principalType,
        args.description,
        caller,
    )


class SchemasIn(OpInput):
    surface: Surface | None = None
    type: str | None = Field(None, max_length=64, description="resolve one type by name")


class SchemasOut(BaseModel):
    schemas: list[dict[str, Any]]


def _list_schemas(services: RecordsServices, caller: Caller, args: SchemasIn, progress: Progress) -> dict[str, Any]:
    return services.schemas.catalog(caller, args.surface, args.type)


OPERATIONS.declare_all(
    Operation(
        name="schemas_create",
        family="records",
        summary="Register or replace a record / document / identity schema.",
        input=SchemaIn,
        output=Out,
        principals=MANAGEMENT,
        method="POST",
        path="/schemas",
        run=_schema_create,
    ),
    Operation(
        name="list_schemas",
        family="records",
        summary="The record, document and identity types (filter by surface or name).",
        input=SchemasIn,
        output=SchemasOut,
        principals=ANY,
        method="GET",
        path="/schemas",
        run=_list_schemas,
        read_only=True,
    ),
)

# -- records -----------------------------------------------------------------------------------


class CreateIn(OpInput):
    type: str = TYPE
    payload: Payload
    externalId: str | None = Field(None, max_length=256, description="your id: a retry returns the same record")
    indexMode: IndexMode | None = Field(None, description="default: the schema's")
    metadata: Flat | None = Field(None, max_length=50)
    scopes: Selector | None = None


def _create(services: RecordsServices, caller: Caller, args: CreateIn, progress: Progress) -> dict[str, Any]:
    return services.typed.create(
        caller, args.type, args.payload, args.externalId, args.indexMode, args.metadata, args.scopes
    )


class IdIn(OpInput):
    id: str = RECORD_ID


def _get(services: RecordsServices, caller: Caller, args: IdIn, progress: Progress) -> dict[str, Any]:
    return services.typed.get(caller, args.id)


class UpdateIn(OpInput):
    id: str = RECORD_ID
    payload: Payload | None = Field(None, description="the whole new payload")
    expectedVersion: int | None = EXPECTED
    indexMode: IndexMode | None = None
    metadata: Flat | None = Field(None, max_length=50)

    @model_validator(mode="after")
    def _something(self) -> UpdateIn:
        if self.payload is None and self.indexMode is None and self.metadata is None:
            raise ValueError("give payload, indexMode or metadata")
        return self


def _update(services: RecordsServices, caller: Caller, args: UpdateIn, progress: Progress) -> dict[str, Any]:
    return services.typed.update(caller, args.id, args.payload, args.expectedVersion, args.indexMode, args.metadata)


class DeleteIn(OpInput):
    id: str = RECORD_ID
    expectedVersion: int | None = EXPECTED


class DeletedOut(BaseModel):
    id: str
    deleted: bool
    version: int


def _delete(services: RecordsServices, caller: Caller, args: DeleteIn, progress: Progress) -> dict[str, Any]:
    return services.typed.delete(caller, args.id, args.expectedVersion)


class QueryIn(OpInput):
    type: str = TYPE
    field: str | None = Field(None, max_length=64, description="a lookup field, createdAt or externalId")
    op: Literal["exact", "range", "prefix", "list"] | None = Field(
        None, description="default: exact with a value, range with from/to, else list by type"
    )
    value: Scalar | None = None
    from_: Scalar | None = Field(None, alias="from", description="range low (inclusive)")
    to: Scalar | None = Field(None, description="range high (inclusive)")
    order: Literal["asc", "desc"] = "asc"
    limit: int = Field(100, ge=1, le=100)
    pageToken: str | None = Field(None, max_length=2048)

    @model_validator(mode="after")
    def _shape(self) -> QueryIn:
        if self.op is None:
            self.op = (
                "exact" if self.value is not None else "range" if (self.from_, self.to) != (None, None) else "list"
            )
        if self.op != "list" and self.field is None:
            raise ValueError(f"op {self.op} needs a field")
        if self.op in ("exact", "prefix") and self.value is None:
            raise ValueError(f"op {self.op} needs a value")
        return self


class QueryOut(BaseModel):
    items: list[dict[str, Any]]
    nextPageToken: str | None


def _query(services: RecordsServices, caller: Caller, args: QueryIn, progress: Progress) -> dict[str, Any]:
    assert args.op is not None  # QueryIn._shape chose one
    return services.typed.query(
        caller,
        args.type,
        args.field,
        args.op,
        args.value,
        args.from_,
        args.to,
        args.order == "desc",
        args.limit,
        args.pageToken,
    )


OPERATIONS.declare_all(
    Operation(
        name="record_create",
        family="records",
        summary="Create a typed record (idempotent by externalId).",
        input=CreateIn,
        output=RecordOut,
        principals=WRITERS,
        method="POST",
        path="/records",
        run=_create,
    ),
    Operation(
        name="record_get",
        family="records",
        summary="Fetch a record by id.",
        input=IdIn,
        output=RecordOut,
        principals=ANY,
        method="GET",
        path="/records/{id}",
        run=_get,
        read_only=True,
    ),
    Operation(
        name="record_update",
        family="records",
        summary="Update a record (payload validated again; optional expected version).",
        input=UpdateIn,
        output=RecordOut,
        principals=WRITERS,
        method="PATCH",
        path="/records/{id}",
        run=_update,
    ),
    Operation(
        name="record_delete",
        family="records",
        summary="Delete a record (its history stays).",
        input=DeleteIn,
        output=DeletedOut,
        principals=WRITERS,
        method="DELETE",
        path="/records/{id}",
        run=_delete,
    ),
    Operation(
        name="record_query",
        family="records",
        summary="Look up records by a field (exact / range / prefix) or list a type.",
        input=QueryIn,
        output=QueryOut,
        principals=ANY,
        method="POST",
        path="/records/lookup",
        run=_query,
        read_only=True,
        mcp_limits={"limit": (3, 10)},
    ),
)


class HistoryIn(OpInput):
    id: str = Field(..., min_length=1, max_length=64, description="a record or document id")
    limit: int = Field(20, ge=1, le=100)
    pageToken: str | None = Field(None, max_length=32)


class HistoryOut(BaseModel):
    id: str
    kind: str
    version: int
    versions: list[dict[str, Any]]
    nextPageToken: str | None


def _history(services: RecordsServices, caller: Caller, args: HistoryIn, progress: Progress) -> dict[str, Any]:
    return services.history.versions(caller, args.id, args.limit, args.pageToken)


OPERATIONS.declare(
    Operation(
        name="version_history",
        family="records",
        summary="A record's or document's changes, newest first, with actor and diff.",
        input=HistoryIn,
        output=HistoryOut,
        principals=ANY,
        method="GET",
        path="/history/{id}",
        run=_history,
        read_only=True,
    )
)
