"""Memory brought from the systems people leave (`engram import-from SYSTEM PATH`), each from its documented export:

- `mcp-memory`: the MCP reference memory server's `memory.json` (JSON Lines of `{"type": "entity", "name",
  "entityType", "observations"}` and `{"type": "relation", "from", "to", "relationType"}`): each observation becomes
  a memory ("<name>: <observation>"), each relation one ("<from> <relation type> <to>."), with the entity's name
  and type in the memory's metadata; an entity with no observation, a memory saying what it is.
- `mem0`: mem0's memories export (a JSON list, or `{"results": [...]}`, of `{"id", "memory", "user_id",
  "created_at", "metadata", "categories"}`): each a memory said when mem0 says it was made, under the scope the
  user's id names (`--scope` may hold `{user_id}`).
- `basic-memory`: a folder of Markdown notes with YAML front matter (`title`, `type`, `tags`, `permalink`),
  observations (`- [category] text #tag`) and relations (`- relation_type [[Target]]`, or a bare `[[Target]]`):
  each note a document (its text searchable, its names in the graph), each observation and relation a memory.
- `chatgpt`: ChatGPT's `conversations.json` (its `mapping` of message nodes, the shown branch followed from
  `current_node`): each conversation a thread, its user's messages stored in memory too (facts extracted).
- `claude`: Claude's `conversations.json` (`chat_messages` with `sender` human / assistant): the same.

Every importer goes through the services a client's call reaches (same checks, same extraction), reports what it
mapped and what it skipped (and why), and is safe to run again only where the target is (a memory stored twice
is two memories: run an importer once per file).

Written by hand: these formats have no maintained readers in Python; YAML (front matter) and JSON are parsed by
PyYAML and the standard library.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram.kernel.caller import Caller
from engram.kernel.clock import iso, parse_time
from engram.kernel.errors import InvalidInput

SYSTEMS = ("mcp-memory", "mem0", "basic-memory", "chatgpt", "claude")
BATCH = 50  # memories stored at once


@dataclass
class Report:
    system: str
    mapped: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)  # why -> how many

    def add(self, what: str, n: int = 1) -> None:
        self.mapped[what] = self.mapped.get(what, 0) + n

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        return {"system": self.system, "mapped": self.mapped, "skipped": self.skipped}


@dataclass(frozen=True)
class Memory:
    content: str
    said_at: datetime | None = None
    session: str | None = None
    metadata: Mapping[str, str | int | float | bool] = field(default_factory=dict)
    scope: str | None = None  # None: the importer's scope


class Target:
    """Where an importer writes: through the operations a client calls (`memory_store_batch`,
    `conversation_append`, `document_upload`), so every item meets the same checks; one they refuse is skipped with
    the reason, not the whole import."""

    def __init__(self, root: Any, caller: Caller, scope: str, report: Report) -> None:
        self.root, self.caller, self.scope, self.report = root, caller, scope, report
        self._pending: list[Memory] = []

    def _call(self, tool: str, arguments: dict[str, Any], note: bool = True) -> bool:
        from engram.kernel.errors import EngramError

        try:
            self.root.call(self.caller, tool, arguments)
        except EngramError as exc:
            if note:
                self.report.skip(f"{tool} refused it: {exc.message[:120]}")
            return False
        return True

    def memory(self, m: Memory) -> None:
        self._pending.append(m)
        if len(self._pending) >= BATCH:
            self.flush()

    def flush(self) -> None:
        by_scope: dict[str, list[Memory]] = {}
        for m in self._pending:
            by_scope.setdefault(m.scope or self.scope, []).append(m)
        self._pending.clear()
        for scope, ms in by_scope.items():
            turns = [_turn(m) for m in ms]
            whole = self._call("memory_store_batch", {"turns": turns, "scopes": [[scope]]}, note=len(ms) == 1)
            if not whole and len(ms) > 1:  # one refused turn refuses its batch (all or nothing): one by one
                for turn in turns:
                    self._call("memory_store_batch", {"turns": [turn], "scopes": [[scope]]})

    def message(self, thread: str, role: str, text: str, metadata: dict[str, Any]) -> bool:
        args = {"thread_id": thread, "role": role, "content": text, "metadata": metadata, "extract_facts": False}
        return self._call("conversation_append", args)

    def document(self, text: str, title: str, filename: str, source: str, labels: list[str]) -> bool:
        import base64

        return self._call("document_upload", {"bytes_base64": base64.b64encode(text.encode()).decode(), "title": title,
                          "filename": filename, "mime_type": "text/markdown", "source": source, "labels": labels[:50],
                          "scopes": [[self.scope]]})  # fmt: skip


def _turn(m: Memory) -> dict[str, Any]:
    return {
        "content": m.content,
        "session_id": m.session,
        "said_at": iso(m.said_at),
        "metadata": dict(m.metadata) or None,
    }


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise InvalidInput(f"{path} is not readable JSON: {exc}") from exc


def mcp_memory(path: Path, to: Target, report: Report) -> None:
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except (ValueError, RecursionError):
            report.skip(f"line {n + 1}: not JSON")
            continue
        if line.get("type") == "entity" and line.get("name"):
            meta = {
                "imported_from": "mcp-memory",
                "entity": str(line["name"]),
                "entityType": str(line.get("entityType", "")),
            }
            observations = [o for o in line.get("observations") or [] if isinstance(o, str) and o.strip()]
            for o in observations:
                to.memory(Memory(f"{line['name']}: {o.strip()}", metadata=meta))
            if not observations:
                to.memory(Memory(f"{line['name']} is a {line.get('entityType') or 'thing'}.", metadata=meta))
            report.add("entities")
            report.add("memories", max(len(observations), 1))
        elif line.get("type") == "relation" and line.get("from") and line.get("to"):
            words = str(line.get("relationType") or "relates to").replace("_", " ")
            meta = {"imported_from": "mcp-memory", "relationType": str(line.get("relationType", ""))}
            to.memory(Memory(f"{line['from']} {words} {line['to']}.", metadata=meta))
            report.add("relations")
            report.add("memories")
        else:
            report.skip("a line that is neither an entity nor a relation")


def mem0(path: Path, to: Target, report: Report) -> None:
    data = _json(path)
    items = data.get("results", data.get("memories")) if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise InvalidInput("not a mem0 export: a list of memories, or {'results': [...]}")
    for item in items:
        text = item.get("memory") if isinstance(item, dict) else None
        if not isinstance(text, str) or not text.strip():
            report.skip("a memory without text")
            continue
        meta: dict[str, str | int | float | bool] = {"imported_from": "mem0", "mem0_id": str(item.get("id", ""))}
        if item.get("categories"):
            meta["categories"] = ", ".join(map(str, item["categories"]))
        user = str(item.get("user_id") or "")
        scope = to.scope.format(user_id=_segment(user)) if "{user_id}" in to.scope and user else None
        if "{user_id}" in to.scope and not user:
            report.skip("a memory without user_id (the scope names one)")
            continue
        to.memory(Memory(text.strip(), said_at=_when(item.get("created_at")), metadata=meta, scope=scope))
        report.add("memories")


FRONT = re.compile(r"\A---\s*\n(.*?)\n---\s*\n", re.S)
OBSERVATION = re.compile(r"^\s*-\s*\[(?P<cat>[^\]]+)\]\s*(?P<text>.+?)\s*$")
RELATION = re.compile(r"^\s*-\s*(?P<rel>[\w ]+?)\s*\[\[(?P<target>[^\]]+)\]\]")
LINK = re.compile(r"\[\[([^\]|#]+)(?:[|#][^\]]*)?\]\]")


def basic_memory(path: Path, to: Target, report: Report) -> None:
    import yaml

    if not path.is_dir():
        raise InvalidInput("basic-memory: give the folder of notes")
    for note in sorted(path.rglob("*.md")):
        text = note.read_text(encoding="utf-8", errors="replace")
        front: dict[str, Any] = {}
        found = FRONT.match(text)
        if found:
            try:
                loaded = yaml.safe_load(found.group(1))
                front = loaded if isinstance(loaded, dict) else {}
            except yaml.YAMLError:
                report.skip("front matter that is not YAML (the note kept, without it)")
            text = text[found.end() :]
        if not text.strip():
            report.skip("an empty note")
            continue
        title = str(front.get("title") or note.stem)
        labels = [f"type:{front.get('type') or 'note'}", *(str(t) for t in front.get("tags") or [])]
        if not to.document(text, title, note.name, f"basic-memory:{note.relative_to(path).as_posix()}", labels):
            continue
        report.add("documents")
        linked: set[str] = set()
        for line in text.splitlines():
            if m := OBSERVATION.match(line):
                to.memory(
                    Memory(f"{title}: {m['text']}", metadata={"imported_from": "basic-memory", "category": m["cat"]})
                )
                report.add("observations")
            elif m := RELATION.match(line):
                target = m["target"].strip()
                linked.add(target)
                said = f"{title} {m['rel'].replace('_', ' ').strip()} {target}."
                to.memory(Memory(said, metadata={"imported_from": "basic-memory", "relationType": m["rel"].strip()}))
                report.add("relations")
        for target in dict.fromkeys(t.strip() for t in LINK.findall(text)):
            if target not in linked:
                to.memory(Memory(f"{title} links to {target}.", metadata={"imported_from": "basic-memory"}))
                report.add("relations")


def _chat(
    to: Target, report: Report, system: str, convs: Iterator[tuple[str, str, list[tuple[str, str, Any]]]]
) -> None:
    for conv_id, title, messages in convs:
        thread = f"{system}-{conv_id}"[:200]
        kept = 0
        for role, text, at in messages:
            if role not in ("user", "assistant"):
                report.skip(f"a {role} message")
                continue
            if not text.strip():
                report.skip("a message without text (an image, a file, a tool call)")
                continue
            said = iso(_when(at)) or ""
            if not to.message(thread, role, text, {"imported_from": system, "title": title[:200], "said_at": said}):
                continue
            kept += 1
            if role == "user":
                to.memory(Memory(text, said_at=_when(at), session=thread, metadata={"imported_from": system}))
                report.add("memories")
        report.add("threads")
        report.add("messages", kept)


def chatgpt(path: Path, to: Target, report: Report) -> None:
    data = _json(path)
    if not isinstance(data, list):
        raise InvalidInput("not a ChatGPT export: conversations.json holds a list of conversations")

    def walk() -> Iterator[tuple[str, str, list[tuple[str, str, Any]]]]:
        for conv in data:
            mapping = conv.get("mapping") or {}
            node, chain = conv.get("current_node"), []
            while node and node in mapping:  # the branch shown, from its last message back to the root
                chain.append(mapping[node])
                node = mapping[node].get("parent")
            messages = []
            for n in reversed(chain):
                msg = n.get("message") or {}
                if not msg:
                    continue
                parts = (msg.get("content") or {}).get("parts") or []
                text = "\n".join(p for p in parts if isinstance(p, str))
                messages.append(((msg.get("author") or {}).get("role", ""), text, msg.get("create_time")))
            yield str(conv.get("id") or conv.get("conversation_id") or ""), str(conv.get("title") or ""), messages

    _chat(to, report, "chatgpt", walk())


def claude(path: Path, to: Target, report: Report) -> None:
    data = _json(path)
    if not isinstance(data, list):
        raise InvalidInput("not a Claude export: conversations.json holds a list of conversations")

    def walk() -> Iterator[tuple[str, str, list[tuple[str, str, Any]]]]:
        for conv in data:
            messages = []
            for m in conv.get("chat_messages") or []:
                text = m.get("text") or "\n".join(
                    c.get("text", "") for c in m.get("content") or [] if isinstance(c, dict) and c.get("type") == "text"
                )
                role = {"human": "user", "assistant": "assistant"}.get(m.get("sender", ""), str(m.get("sender")))
                messages.append((role, str(text or ""), m.get("created_at")))
            yield str(conv.get("uuid") or ""), str(conv.get("name") or ""), messages

    _chat(to, report, "claude", walk())


IMPORTERS: dict[str, Callable[[Path, Target, Report], None]] = {
    "mcp-memory": mcp_memory, "mem0": mem0, "basic-memory": basic_memory, "chatgpt": chatgpt, "claude": claude,
}  # fmt: skip


def run(system: str, path: Path, root: Any, caller: Caller, scope: str) -> dict[str, Any]:
    """Import `path` (a file, or basic-memory's folder) of `system` under `scope`: what was mapped, what skipped."""
    if system not in IMPORTERS:
        raise InvalidInput(f"unknown system {system!r}: one of {', '.join(SYSTEMS)}")
    if "{user_id}" not in scope and scope not in root.identity.registered(caller.context_id):
        raise InvalidInput(f"scope path(s) not registered: {scope} (register with `engram scopes create`)")
    report = Report(system)
    target = Target(root, caller, scope, report)
    IMPORTERS[system](path, target, report)
    target.flush()
    return report.as_dict()


def _when(value: Any) -> datetime | None:
    """An export's time: ISO 8601 text, or seconds since the epoch (ChatGPT's)."""
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    try:
        return parse_time(value) if isinstance(value, str) and value else None
    except ValueError:
        return None


def _segment(user: str) -> str:
    """A user id made a scope path segment."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", user).strip("-").lower() or "unknown"
