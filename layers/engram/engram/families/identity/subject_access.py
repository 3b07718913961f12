"""Subject access: everything a subject owns, as stored, page by page (`subject_export`) — erasure's counterpart
(#27), for the request to see or to take one's data (GDPR articles 15 and 20) before, or instead of, erasing it.

The objects are those an erasure of the same subject takes: every family's scoped kinds, an object the subject's
when one of its scope tags is the subject's path or below it (`engram.erasure.Subject.takes`), expired objects not
yet swept included; and of those only what the caller sees (`can_see`, the one rule of visibility). Each comes with
its stored data and its earlier versions still stored (`earlier`: those that were the subject's too), and an object
with a file (a document, a workspace file) with a link to its bytes where the blob store gives one (S3: presigned,
for an hour). Parts (a document's chunks, a file's windows) are not repeated: they
are their object's text (`document_get` with `include_text`).

The cursor is the kind and the last id given, so each page is one key range a kind. A page stops at `limit`
objects, at ~2 MB of them (it must fit a Lambda answer, which over MCP carries it twice) or after reading
`SCAN` items; it may hold fewer than `limit`, and the export is complete when the cursor is null.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import TYPE_CHECKING, Any

from engram.clock import iso
from engram.erasure import EPOCH, Subject
from engram.errors import InvalidInput
from engram.identity import Caller
from engram.kernel import BaseService
from engram.ports import Item
from engram.scopes import can_see

if TYPE_CHECKING:
    from engram.wiring import Engram

SCAN = 5000  # items read at most for one page
PAGE_BYTES = 2_000_000
BAD_CURSOR = "the cursor is not one subject_export gave"


class SubjectAccess(BaseService):
    def __init__(self, root: Engram) -> None:
        super().__init__(root.kernel)
        self.root = root

    def kinds(self) -> list[tuple[str, str]]:
        """(kind, family) of every scoped kind, in the families' registry order."""
        families = self.root.families()
        return [(name, fam.name) for fam in families for name, k in fam.kinds.items() if k.access == "scoped"]

    def export(self, caller: Caller, subject: Subject, cursor: str | None, limit: int) -> dict[str, Any]:
        kinds = self.kinds()
        at, after = _position(cursor, [k for k, _ in kinds])
        grant = [[g] for g in caller.principal.grant]
        objects: list[dict[str, Any]] = []
        read = size = 0
        store_cursor: str | None = None  # the store's own, within this call
        while at < len(kinds) and len(objects) < limit and size < PAGE_BYTES and read < SCAN:
            kind, family = kinds[at]
            start = after + "\x00" if after is not None and store_cursor is None else None  # the least id after it
            page = self.records.query(caller.context_id, kind, start=start, cursor=store_cursor,
                                      limit=min(500, SCAN - read), now=EPOCH)  # fmt: skip
            read += 1  # an empty page counts too
            for item in page.items:
                read += 1
                after = item.id
                if subject.takes(item) and can_see(item.data.get("scopes"), grant):
                    objects.append(self._object(caller.context_id, kind, family, item, subject, grant))
                    size += len(json.dumps(objects[-1], default=str))
                    if len(objects) == limit or size >= PAGE_BYTES:
                        break
            else:
                store_cursor = page.cursor
                if page.cursor is None:
                    at, after = at + 1, None
        cursor = _cursor(kinds[at][0], after) if at < len(kinds) else None
        return {"subject": subject.describe(), "objects": objects, "cursor": cursor}

    def _object(
        self, ctx: str, kind: str, family: str, item: Item, subject: Subject, grant: list[list[str]]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": kind,
            "family": family,
            "id": item.id,
            "version": item.version,
            "created_at": iso(item.created_at),
            "updated_at": iso(item.updated_at),
            "expires_at": iso(item.expires_at),
            "data": item.data,
        }
        blob = item.data.get("blob_key")
        if isinstance(blob, str) and (url := self.blobs.url(blob)) is not None:
            out["download_url"] = url
        if item.version > 1:  # what it said before, as an erasure would take it too: the versions still stored
            out["earlier"] = [
                {"version": v.version, "recorded_at": iso(v.updated_at), "data": v.data}
                for v in self.records.history(ctx, kind, item.id)
                if v.version < item.version and _also(subject, v.data.get("scopes"), grant)
            ]
        return out


def _also(subject: Subject, scopes: Any, grant: list[list[str]]) -> bool:
    """Whether an earlier version is the subject's too, and in the caller's view (an object that changed hands
    keeps its earlier owner's versions out of this subject's export)."""
    return can_see(scopes, grant) and (bool(subject.ids) or subject.owns(scopes))


def _cursor(kind: str, after: str | None) -> str:
    return base64.urlsafe_b64encode(json.dumps({"k": kind, "a": after}).encode()).decode()


def _position(cursor: str | None, kinds: list[str]) -> tuple[int, str | None]:
    """(index of the kind, the last id given) a cursor names; a cursor this tool did not give is refused."""
    if cursor is None:
        return 0, None
    try:
        named = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, binascii.Error, UnicodeError) as exc:
        raise InvalidInput(BAD_CURSOR, code="invalid_cursor") from exc
    if not isinstance(named, dict) or named.get("k") not in kinds or not isinstance(named.get("a"), str | None):
        raise InvalidInput(BAD_CURSOR, code="invalid_cursor")
    return kinds.index(named["k"]), named["a"]
