"""Causantic's tools over Engram memory: plain-text answers within a token budget.

A project is a scope path (or its last segment, when unambiguous); sessions are the
`session_id`s of stored turns.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from engram.families.memory.plan import turn_text
from engram.families.memory.service import MemoryService
from engram.kernel.caller import Caller
from engram.kernel.clock import parse_time
from engram.kernel.errors import InvalidInput
from engram.kernel.ports import scan
from engram.kernel.scopes import covers
from engram.search.terms import approx_tokens

NO_MEMORY = "No relevant memory found."
NO_PREDICTION = "No predictions available based on current context."
# Below it a chunk is not worth the tokens: a weak match (for the scale, docs/tools.md "Scores"; off-topic
# queries' hits score below it on the dev collections, bench/RESULTS.md "Scores")
RELEVANT_SCORE = 0.3
# ... and it must match the question by meaning: on its own (MEANING_ALONE: cosine 0.4, a score of 0.5 from
# meaning alone), or at least a little beside shared words (SOME_MEANING: cosine 0.19). "Started work on the
# dashboard charts" shares "work" with "how does the authentication system work?" and nothing else: in a
# small memory that rare word alone scored 0.55, while its meaning is unrelated (cosine < 0.1).
MEANING_ALONE = 0.5
SOME_MEANING = 0.15
SHORT_SESSIONS = 3  # "short" range: the most recent sessions


def _fmt_day(dt: datetime) -> str:
    return f"{dt:%b} {dt.day}, {dt.year}"


def _fmt_time(dt: datetime) -> str:
    return dt.strftime("%I:%M %p").lstrip("0")


class CausanticService:
    def __init__(self, memory: MemoryService, token_budget: int = 2000) -> None:
        self.memory = memory
        self.budget = token_budget

    # -- sessions and projects ------------------------------------------------------------

    def _sessions(self, caller: Caller) -> list[dict[str, Any]]:
        visibility = self.memory.identity.read_lens(caller, None)
        from engram.kernel.scopes import can_see

        items = scan(self.memory.records, caller.context_id, "session")
        return [i.data for i in items if can_see(i.data["scopes"], visibility)]

    def resolve_project(self, caller: Caller, project: str) -> str:
        if "/" in project:
            return project
        paths = {p for s in self._sessions(caller) for p in s["scopes"]}
        hits = sorted(p for p in paths if p.rsplit("/", 1)[-1] == project)
        if len(hits) == 1:
            return str(hits[0])
        if len(hits) > 1:
            raise InvalidInput(f"project {project!r} is ambiguous: {', '.join(hits)}")
        return project  # unknown: callers answer with their own "none found" text

    def list_projects(self, caller: Caller) -> str:
        projects: dict[str, dict[str, Any]] = {}
        for s in self._sessions(caller):
            for path in s["scopes"]:
                p = projects.setdefault(path, {"chunks": 0, "first": s["first_at"], "last": s["last_at"]})
                p["chunks"] += s["turns"]
                p["first"], p["last"] = min(p["first"], s["first_at"]), max(p["last"], s["last_at"])
        if not projects:
            return "No projects found in memory."
        lines = ["Projects in memory:"]
        for path, p in sorted(projects.items()):
            first, last = parse_time(p["first"]), parse_time(p["last"])
            assert first is not None and last is not None
            span = (
                f"{first:%b %Y}"
                if (first.year, first.month) == (last.year, last.month)
                else f"{first:%b %Y} – {last:%b %Y}"
            )
            lines.append(f"- {path} ({p['chunks']} chunks, {span})")
        return "\n".join(lines)

    def _project_sessions(
        self, caller: Caller, project: str, start: str | None, end: str | None, days_back: float | None
    ) -> tuple[str, list[dict[str, Any]]]:
        path = self.resolve_project(caller, project)
        lo, hi = parse_time(start), parse_time(end)
        if days_back is not None:
            if days_back <= 0:
                raise InvalidInput("days_back must be positive")
            lo = self.memory.clock.now() - timedelta(days=days_back)
        sessions = []
        for s in self._sessions(caller):
            if not any(covers(path, t) for t in s["scopes"]):
                continue
            first, last = parse_time(s["first_at"]), parse_time(s["last_at"])
            assert first is not None and last is not None
            if (lo and last < lo) or (hi and first > hi):
                continue
            sessions.append(s)
        sessions.sort(key=lambda s: s["last_at"], reverse=True)
        return path, sessions

    def list_sessions(
        self,
        caller: Caller,
        project: str,
        start: str | None = None,
        end: str | None = None,
        days_back: float | None = None,
    ) -> str:
        _, sessions = self._project_sessions(caller, project, start, end, days_back)
        if not sessions:
            return f'No sessions found for project "{project}".'
        lines = [f'Sessions for "{project}" ({len(sessions)} total):']
        for s in sessions:
            first, last = parse_time(s["first_at"]), parse_time(s["last_at"])
            assert first is not None and last is not None
            when = f"{first:%b} {first.day}, {_fmt_time(first)} – {_fmt_time(last)}"
            if first.date() != last.date():
                when = f"{first:%b} {first.day}, {_fmt_time(first)} – {last:%b} {last.day}, {_fmt_time(last)}"
            lines.append(f"- {s['session_id']} ({when}, {s['turns']} chunks, {s['tokens']} tokens)")
        return "\n".join(lines)

    # -- retrieval ------------------------------------------------------------------------

    def _search(self, caller: Caller, query: str, rng: str, project: str | None, budget: int) -> list[dict[str, Any]]:
        if rng not in ("short", "long"):
            raise InvalidInput('range must be "short" or "long"')
        extra = [[self.resolve_project(caller, project)]] if project else None

        # Relevance first, and a floor: the chunks scoring at least RELEVANT_SCORE (scores in [0, 1], never
        # rising down the list: docs/tools.md "Scores"), in hybrid order.
        found = self.memory.recall(
            caller, query, k=20, mode="hybrid", kinds=("turn",), extra_visibility=extra, everything_when_small=False
        )
        hits = [h for h in found["results"] if relevant(h)]
        if rng == "short" and hits:
            # recent context first: the relevant chunks of the most recent sessions, then the other relevant
            # ones newest first — never a recent chunk that is not relevant while relevant ones exist
            recent = self._recent_sessions(caller, project)
            mine = [h for h in hits if h["session_id"] in recent]
            older = sorted((h for h in hits if h["session_id"] not in recent),
                           key=lambda h: str(h.get("said_at") or ""), reverse=True)  # fmt: skip
            hits = mine + older
        return _fit(hits, budget, keep_newest=False)

    def _recent_sessions(self, caller: Caller, project: str | None) -> set[str]:
        sessions = self._sessions(caller)
        if project:
            path = self.resolve_project(caller, project)
            sessions = [s for s in sessions if any(covers(path, t) for t in s["scopes"])]
        sessions.sort(key=lambda s: s["last_at"], reverse=True)
        return {s["session_id"] for s in sessions[:SHORT_SESSIONS]}

    def recall(self, caller: Caller, query: str, rng: str = "short", project: str | None = None) -> str:
        hits = self._search(caller, query, rng, project, self.budget)
        if not hits:
            return NO_MEMORY
        body = _assemble(hits)
        return f"Found {len(hits)} relevant memory chunks ({approx_tokens(body)} tokens):\n\n{body}"

    def predict(self, caller: Caller, context: str, project: str | None = None) -> str:
        hits = self._search(caller, context, "long", project, self.budget // 2)
        if not hits:
            return NO_PREDICTION
        return f"Potentially relevant context ({len(hits)} items):\n\n{_assemble(hits)}"

    def reconstruct(
        self,
        caller: Caller,
        project: str,
        *,
        session_id: str | None = None,
        start: str | None = None,
        end: str | None = None,
        days_back: float | None = None,
        previous_session: bool = False,
        current_session_id: str | None = None,
        keep_newest: bool = True,
    ) -> str:
        try:
            _, sessions = self._project_sessions(caller, project, start, end, days_back)
            if previous_session:
                if not current_session_id:
                    return "Error: current_session_id is required when previous_session is true"
                ordered = sorted(sessions, key=lambda s: s["first_at"])
                ids = [s["session_id"] for s in ordered]
                if current_session_id not in ids:
                    return f"Error: session {current_session_id!r} not found in project {project!r}"
                pos = ids.index(current_session_id)
                if pos == 0:
                    return f"Error: no session before {current_session_id!r}"
                chosen = [ordered[pos - 1]]
            elif session_id:
                chosen = [
                    s for s in sessions if s["session_id"] == session_id or s["session_id"].startswith(session_id)
                ]
                if not chosen:
                    return f"Error: session {session_id!r} not found in project {project!r}"
            else:
                chosen = sessions
            if not chosen:
                return f'No sessions found for project "{project}".'
            turns = self._turns(caller, {s["session_id"] for s in chosen}, start, end)
            if not turns:
                return f'No sessions found for project "{project}".'
            kept = _fit(turns, self.budget, keep_newest)
            return _with_boundaries(kept, truncated=len(kept) < len(turns), keep_newest=keep_newest)
        except Exception as exc:  # Causantic's reconstruct answers errors as text
            return f"Error: {getattr(exc, 'message', str(exc))}"

    def _turns(self, caller: Caller, session_ids: set[str], start: str | None, end: str | None) -> list[dict[str, Any]]:
        from engram.kernel.scopes import can_see

        visibility = self.memory.identity.read_lens(caller, None)
        lo, hi = parse_time(start), parse_time(end)
        out: list[dict[str, Any]] = []
        for item in scan(self.memory.records, caller.context_id, "turn"):
            d = item.data
            said = parse_time(d["said_at"])
            assert said is not None
            if (
                d["session_id"] in session_ids
                and can_see(d["scopes"], visibility)
                and not (lo and said < lo)
                and not (hi and said > hi)
            ):
                text = turn_text(d["content"], d["metadata"].get("speaker") or d["role"])
                out.append({"id": item.id, "text": text, "said_at": d["said_at"], "session_id": d["session_id"]})
        out.sort(key=lambda t: (t["said_at"], t["id"]))
        return out


def relevant(hit: dict[str, Any]) -> bool:
    """Worth the tokens: at least RELEVANT_SCORE, and matching the question by meaning, alone or beside shared
    words (without an embedder: sharing words)."""
    evidence = hit.get("evidence") or {}
    lexical, semantic = float(evidence.get("lexical") or 0.0), evidence.get("semantic")
    if hit["score"] < RELEVANT_SCORE:
        return False
    if semantic is None:
        return lexical > 0.0
    return bool(semantic >= MEANING_ALONE or (lexical > 0.0 and semantic >= SOME_MEANING))


def _fit(hits: Sequence[dict[str, Any]], budget: int, keep_newest: bool) -> list[dict[str, Any]]:
    """Keep chunks in order until the budget is spent (from the newest end when keep_newest)."""
    order = list(reversed(hits)) if keep_newest else list(hits)
    kept: list[dict[str, Any]] = []
    used = 0
    for h in order:
        cost = approx_tokens(h["text"]) + 8
        if used + cost > budget and kept:
            break
        kept.append(h)
        used += cost
    return list(reversed(kept)) if keep_newest else kept


def _assemble(hits: Sequence[dict[str, Any]]) -> str:
    return "\n\n".join(f"[{str(h.get('said_at') or '')[:16].replace('T', ' ')}] {h['text']}" for h in hits)


def _with_boundaries(turns: Sequence[dict[str, Any]], truncated: bool, keep_newest: bool = True) -> str:
    lines: list[str] = []
    if truncated and keep_newest:
        lines.append("[earlier context truncated to fit the token budget]")
    current = None
    for t in turns:
        if t["session_id"] != current:
            current = t["session_id"]
            said = parse_time(t["said_at"])
            assert said is not None
            lines.append(f"\n=== Session {current} ({_fmt_day(said)}, {_fmt_time(said)}) ===")
        lines.append(f"[{t['said_at'][11:16]}] {t['text']}")
    if truncated and not keep_newest:
        lines.append("\n[later context truncated to fit the token budget]")
    return "\n".join(lines).strip()
