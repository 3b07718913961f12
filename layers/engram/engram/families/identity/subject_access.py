"""Subject access: everything a subject owns, as stored, page by page (`subject_export`) — erasure's counterpart
(#27), for the request to see or to take one's data (GDPR articles 15 and 20) before, or instead of, erasing it.

The objects are those an erasure of the same subject takes: every family's scoped kinds, an object the subject's
when one of its scope tags is the subject's path or below it (`engram.trust.erasure.Subject.takes`), expired objects not
yet swept included; and of those only what the caller sees (`can_see`, the one rule of visibility). Each comes with
its stored data and its earlier versions still stored (`earlier`: those that were the subject's too), and an object
with a file (a document, a workspace file) with a link to its bytes where the blob store gives one (S3: presigned,
for an hour). A shared object (an entity, an edge: `engram.kernel.parts`) comes as the subject's parts of it alone — no
other scope's sentences, sources or counts, what callers wrote only when all of it was the subject's — and without
earlier versions, each of which holds every part. Parts (a document's chunks, a file's windows) are not repeated: they
are their object's text (`document_get` with `include_text`).

The cursor is the kind and the last id given, so each page is one key range a kind. A page stops at `limit`
objects, at ~2 MB of them (it must fit a Lambda answer, which over MCP carries it twice) or after reading
`SCAN` items; it may hold fewer than `limit`, and the export is complete when the cursor is null. An object's
earlier versions (newest first) that the page cannot hold go on in the next one: the cursor then also names the
version below which they remain, and that page opens with the object again, `continued`, with the rest.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import TYPE_CHECKING, Any

from engram.kernel.caller import Caller
from engram.kernel.clock import iso
from engram.kernel.errors import InvalidInput
from engram.kernel.parts import part_of
from engram.kernel.ports import Item
from engram.kernel.scan import EPOCH
from engram.kernel.scopes import can_see
from engram.kernel.services import BaseService
from engram.trust.erasure import Subject

if TYPE_CHECKING:
    from engram.wiring import Engram

SCAN = 5000  # items read at most for one page
PAGE_BYTES = 2_000_000
HISTORY_PAGE = 50  # an object's earlier versions read at a time
BAD_CURSOR = "the cursor is not one subject_export gave"


class SubjectAccess(BaseService):
    def __init__(self, root: Engram) -> None:
        super().__init__(root.kernel)
        self.root = root

    def scoped_kinds(self) -> list[tuple[str, str]]:
        """(kind, family) of every scoped kind, in the families' registry order."""
        families = self.root.families()
        return [(name, fam.name) for fam in families for name, k in fam.kinds.items() if k.access == "scoped"]

    def export(self, caller: Caller, subject: Subject, cursor: str | None, limit: int) -> dict[str, Any]:
        kinds = self.scoped_kinds()
        at, after, below = _position(cursor, [k for k, _ in kinds])
        ctx, grant = caller.context_id, [[g] for g in caller.principal.grant]
        objects: list[dict[str, Any]] = []
        read = size = 0
        if below is not None:  # the rest of an object's earlier versions, which the page before could not hold
            kind, family = kinds[at]
            item = self.records.get(ctx, kind, after or "", now=EPOCH)
            if item is None or not (subject.takes(item) and can_see(item.data.get("scopes"), grant)):
                raise InvalidInput(BAD_CURSOR, code="invalid_cursor")
            rest, below = self._earlier(ctx, kind, item.id, below, subject, grant, PAGE_BYTES)
            objects.append({"kind": kind, "family": family, "id": item.id, "continued": True, "earlier": rest})
            size = len(json.dumps(objects[-1], default=str))
        store_cursor: str | None = None  # the store's own, within this call
        while below is None and at < len(kinds) and len(objects) < limit and size < PAGE_BYTES and read < SCAN:
            kind, family = kinds[at]
            start = after + "\x00" if after is not None and store_cursor is None else None  # the least id after it
            page = self.records.query(ctx, kind, start=start, cursor=store_cursor, limit=min(500, SCAN - read),
                                      now=EPOCH)  # fmt: skip
            read += 1  # an empty page counts too
            for item in page.items:
                read += 1
                after = item.id
                if subject.takes(item) and can_see(item.data.get("scopes"), grant):
                    objects.append(self._object(kind, family, item, subject, grant))
                    size += len(json.dumps(objects[-1], default=str))
                    if (
                        item.version > 1 and not self.kinds[kind].shared
                    ):  # what it said before: the versions still stored, as far as the page holds
                        earlier, below = self._earlier(ctx, kind, item.id, item.version, subject, grant,
                                                       PAGE_BYTES - size)  # fmt: skip
                        objects[-1]["earlier"] = earlier
                        size += len(json.dumps(earlier, default=str))
                    if below is not None or len(objects) == limit or size >= PAGE_BYTES:
                        break
            else:
                store_cursor = page.cursor
                if page.cursor is None:
                    at, after = at + 1, None
        cursor = _cursor(kinds[at][0], after, below) if at < len(kinds) else None
        return {"subject": subject.describe(), "objects": objects, "cursor": cursor}

    def _object(self, kind: str, family: str, item: Item, subject: Subject, grant: list[list[str]]) -> dict[str, Any]:
        data = item.data
        if self.kinds[kind].shared:  # several scopes' object: the subject's parts of it, no versions (they hold all)
            data = part_of(data, lambda tags: subject.owns_part(tags) and can_see(tags, grant))
        out: dict[str, Any] = {
            "kind": kind,
            "family": family,
            "id": item.id,
            "version": item.version,
            "created_at": iso(item.created_at),
            "updated_at": iso(item.updated_at),
            "expires_at": iso(item.expires_at),
            "data": data,
        }
        blob = item.data.get("blob_key")
        if isinstance(blob, str) and (url := self.blobs.url(blob)) is not None:
            out["download_url"] = url
        return out

    def _earlier(
        self, ctx: str, kind: str, id_: str, before: int, subject: Subject, grant: list[list[str]], room: int
    ) -> tuple[list[dict[str, Any]], int | None]:
        """An object's versions below `before`, newest first, that were the subject's too, within `room` bytes
        (one at least): them, and the version below which more remain (None: no more)."""
        out: list[dict[str, Any]] = []
        used = 0
        while True:  # a store may give fewer than asked (DynamoDB: a megabyte a query): on until none is left
            versions = self.records.history_page(ctx, kind, id_, before, HISTORY_PAGE)
            if not versions:
                return out, None
            for v in versions:
                before = v.version
                if not _also(subject, v.data.get("scopes"), grant):
                    continue
                entry = {"version": v.version, "recorded_at": iso(v.updated_at), "data": v.data}
                n = len(json.dumps(entry, default=str))
                if out and used + n > room:
                    return out, v.version + 1
                out.append(entry)
                used += n


def _also(subject: Subject, scopes: Any, grant: list[list[str]]) -> bool:
    """Whether an earlier version is the subject's too, and in the caller's view (an object that changed hands
    keeps its earlier owner's versions out of this subject's export)."""
    return can_see(scopes, grant) and (bool(subject.ids) or subject.owns(scopes))


def _cursor(kind: str, after: str | None, below: int | None) -> str:
    named: dict[str, Any] = {"k": kind, "a": after} | ({"v": below} if below is not None else {})
    return base64.urlsafe_b64encode(json.dumps(named).encode()).decode()


def _position(cursor: str | None, kinds: list[str]) -> tuple[int, str | None, int | None]:
    """(index of the kind, the last id given, the version below which its earlier versions remain) a cursor
    names; a cursor this tool did not give is refused."""
    if cursor is None:
        return 0, None, None
    try:
        named = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, binascii.Error, UnicodeError, RecursionError) as exc:
        raise InvalidInput(BAD_CURSOR, code="invalid_cursor") from exc
    if not isinstance(named, dict) or named.get("k") not in kinds or not isinstance(named.get("a"), str | None):
        raise InvalidInput(BAD_CURSOR, code="invalid_cursor")
    below = named.get("v")
    if below is not None and (type(below) is not int or not 1 < below < 2**62 or named["a"] is None):
        raise InvalidInput(BAD_CURSOR, code="invalid_cursor")
    return kinds.index(named["k"]), named["a"], below
