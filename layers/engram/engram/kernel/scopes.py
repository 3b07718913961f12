"""Scope paths and DNF selectors. Pure functions: no I/O.

A path is `segment/segment/...` (lowercase letters, digits, `-`, `_`, `.`, `@`, `:`). A selector is
DNF: `[["a", "b"], ["c"]]` means (a AND b) OR c. A document tagged with scope paths S matches a
clause when every path p of the clause is covered by S: some s in S equals p or lies below it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from engram.kernel.errors import Forbidden, InvalidInput

_SEGMENT = re.compile(r"[A-Za-z0-9_.@:\-]+")
MAX_PATH_LEN = 256


def check_path(path: str) -> str:
    """A well-formed path, exactly: no empty, `.` or `..` segment, no whitespace or control character
    anywhere (a trailing newline included: `fullmatch`, not `match` with `$`)."""
    if (
        not isinstance(path, str)
        or not path
        or len(path) > MAX_PATH_LEN
        or not all(_SEGMENT.fullmatch(s) and s not in (".", "..") for s in path.split("/"))
    ):
        raise InvalidInput(f"invalid scope path {path!r}: use segments like org/acme/user/alice")
    return path


def check_selector(selector: Sequence[Sequence[str]], what: str = "scopes") -> list[list[str]]:
    if not isinstance(selector, list | tuple) or not selector:
        raise InvalidInput(f"{what} must be a non-empty list of lists of scope paths (DNF)")
    out: list[list[str]] = []
    for clause in selector:
        if not isinstance(clause, list | tuple) or not clause:
            raise InvalidInput(f"each clause of {what} must be a non-empty list of scope paths")
        out.append([check_path(p) for p in clause])
    return out


def covers(prefix: str, path: str) -> bool:
    """`path` equals `prefix` or lies below it."""
    return path == prefix or path.startswith(prefix + "/")


def within(grant: Sequence[str], paths: Iterable[str]) -> bool:
    """Every path lies inside the grant (equals one of its paths or lies below it)."""
    return all(any(covers(g, p) for g in grant) for p in paths)


def related(a: str, b: str) -> bool:
    return covers(a, b) or covers(b, a)


def matches(scopes: Iterable[str], selector: Sequence[Sequence[str]] | None) -> bool:
    if selector is None:
        return True
    tags = list(scopes)
    return any(all(any(covers(p, s) for s in tags) for p in clause) for clause in selector)


def can_see(scopes: Iterable[str] | None, visibility: Sequence[Sequence[str]]) -> bool:
    """THE visibility rule, for every kind of object (memories, attributes, entities and edges, documents,
    chunks, folders, collections, sessions, ...): an object is seen by a caller when its scope tags match
    the caller's visibility selector (the lens narrowed by the key's grant, `narrow`). An object with no
    tags is seen by nobody: every write tags what it stores."""
    tags = list(scopes or ())
    return bool(tags) and matches(tags, visibility)


def narrow(lens: Sequence[Sequence[str]] | None, grant: Sequence[str]) -> list[list[str]]:
    """The lens AND the grant, as DNF. A clause disjoint from every grant path is refused (403)."""
    grant_dnf = [[g] for g in grant]
    if lens is None:
        return grant_dnf
    out: list[list[str]] = []
    for clause in lens:
        for path in clause:
            if not any(related(path, g) for g in grant):
                raise Forbidden(f"scope {path!r} is outside the key's grant", code="grant_denied")
        for g in grant:
            if all(related(p, g) for p in clause):
                # keep the narrower of each path and the grant path
                out.append(sorted({p if covers(g, p) else g for p in clause}))
    if not out:
        raise Forbidden("lens lies outside the key's grant", code="grant_denied")
    return out


def write_paths(scopes: Sequence[Sequence[str]] | None, grant: Sequence[str]) -> list[str]:
    """The paths a write is tagged with. Every path must lie inside the grant (403 otherwise).

    With no `scopes` the write is tagged with the grant itself.
    """
    if scopes is None:
        return sorted(set(grant))
    paths = sorted({p for clause in scopes for p in clause})
    for p in paths:
        if not any(covers(g, p) for g in grant):
            raise Forbidden(f"scope {p!r} is outside the key's grant", code="grant_denied")
    return paths


def is_registered(path: str, registered: Iterable[str]) -> bool:
    """A path may be used when it is registered, or is an ancestor of a registered path."""
    return any(covers(path, r) for r in registered)


def tags_key(tags: Iterable[str]) -> str:
    """A short stable name of a set of scope paths: what is deduplicated or named per scope set (content
    hashes, externalIds, sessions) is keyed by it, so another scope set's objects can never be matched."""
    import hashlib

    return hashlib.sha256("|".join(sorted(set(tags))).encode()).hexdigest()[:12]
