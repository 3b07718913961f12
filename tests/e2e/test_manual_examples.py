"""Every shell and JSON example of the README and the manual runs (issue #55), or says why it cannot.

Each page's fenced `bash` blocks run in order against a live `engram serve` over a fresh data folder, as a reader
would type them: `engram ...` (however it is spelled: `.venv/bin/engram`, `uv run engram`) runs the CLI there, and a
key it prints becomes `$K`; `make dev` is the server (`make sync` is this environment); `curl` is sent as written (its
`-s -X -H -d` read by `shlex`, localhost:8000 pointed at the server) and must answer 2xx with JSON, holding every
`"name": "value"` pair the `# ->` comment after it shows (texts elided with `...` and numbers aside). `json` blocks
must parse. A block that cannot run here says so, with the reason, in an HTML comment on the line before it: `<!-- not
runnable: ... -->`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from engram.cli.devserver import start, stop

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(
    r"(?:^<!-- not runnable: (?P<why>[^>]*?) -->\n)?^```(?P<lang>bash|json)\n(?P<body>.*?)^```$", re.M | re.S
)
PAIR = re.compile(r'"([A-Za-z_]+)": ("[^"]*"|-?\d+(?:\.\d+)?|true|false|null)')


@dataclass
class Block:
    page: Path
    lang: str
    body: str
    why: str | None


def blocks() -> Iterator[Block]:
    for page in PAGES:
        for m in FENCE.finditer(page.read_text()):
            yield Block(page, m["lang"], m["body"], m["why"])


@dataclass
class Reader:
    """One reader's shell: a data folder, the server once `make dev` ran, the variables set so far."""

    data: Path
    variables: dict[str, str] = field(default_factory=dict)
    server: subprocess.Popen[bytes] | None = None
    url: str = ""
    sent: int = 0

    def run(self, block: Block) -> None:
        lines = block.body.replace("\\\n", " ").splitlines()
        for n, line in enumerate(lines):
            command = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
            if not command:
                continue
            expect = [x[4:] for x in lines[n + 1 :] if x.startswith("# ->")][:1] if _next_is_expect(lines, n) else []
            for part in command.split("; "):
                self.one(part.strip(), expect[0] if expect else "", block)

    def one(self, command: str, expect: str, block: Block) -> None:
        words = shlex.split(self.expand(command))
        if re.fullmatch(r"[A-Z]+=.*", command):
            name, value = command.split("=", 1)
            self.variables[name] = self.expand(shlex.split(value)[0]) if value.strip() else ""
            return
        if words[:2] == ["make", "sync"]:
            return
        if words[:2] == ["make", "dev"]:
            if self.server is None:
                self.server, self.url = start(self.data)
            return
        if words[0] in (".venv/bin/engram", "engram") or words[:3] == ["uv", "run", "engram"]:
            args = words[3:] if words[0] == "uv" else words[1:]
            env = dict(os.environ, ENGRAM_DATA_DIR=str(self.data))
            done = subprocess.run([sys.executable, "-m", "engram.cli", *args], env=env, capture_output=True, text=True)
            assert done.returncode == 0, f"{block.page.name}: {command}\n{done.stderr[-2000:]}"
            last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
            if last.startswith("sk-"):
                self.variables["K"] = last
            return
        assert words[0] == "curl", f"{block.page.name}: no way to run {command!r}: mark the block not runnable"
        self.curl(words[1:], expect, block)

    def expand(self, text: str) -> str:
        text = text.replace("sk-...", self.variables.get("K", "sk-..."))
        for name, value in sorted(self.variables.items(), key=lambda kv: -len(kv[0])):
            text = text.replace(f"${name}", value)
        return text

    def curl(self, args: list[str], expect: str, block: Block) -> None:
        assert self.server is not None, f"{block.page.name}: curl before the server is started"
        method, headers, body, target = "GET", {}, None, None
        at = 0
        while at < len(args):
            a = args[at]
            if a == "-s":
                pass
            elif a == "-X":
                at += 1
                method = args[at]
            elif a == "-H":
                at += 1
                name, value = args[at].split(":", 1)
                headers[name.strip()] = value.strip()
            elif a == "-d":
                at += 1
                body, method = args[at], "POST" if method == "GET" else method
            else:
                target = a
            at += 1
        assert target is not None
        url = re.sub(r"^(https?://)?(localhost|127\.0\.0\.1):8000", self.url, target)
        answer = httpx.request(method, url, headers=headers, content=body, timeout=60)
        self.sent += 1
        assert answer.status_code < 300, f"{block.page.name}: {method} {target} -> {answer.status_code} {answer.text}"
        got = json.dumps(answer.json())
        for name, value in PAIR.findall(expect):
            if (value.startswith('"') and "..." in value) or value[0] in "-0123456789":
                continue  # an elided text, or a number (a time) that differs from run to run
            want = f'"{name}": {value}'
            assert want in got, f"{block.page.name}: {target} answered without {want}: {got[:2000]}"

    def close(self) -> None:
        if self.server is not None:
            stop(self.server)


def _next_is_expect(lines: list[str], n: int) -> bool:
    return n + 1 < len(lines) and lines[n + 1].startswith("# ->")


def test_every_block_runs_or_says_why_not(tmp_path: Path) -> None:
    by_page: dict[Path, list[Block]] = {}
    for b in blocks():
        by_page.setdefault(b.page, []).append(b)
    assert ROOT / "README.md" in by_page and ROOT / "docs" / "getting-started.md" in by_page
    ran = 0
    for page, found in by_page.items():
        reader = Reader(tmp_path / page.stem)
        try:
            for b in found:
                if b.lang == "json":
                    json.loads(b.body)  # every JSON example parses, runnable or not
                if b.why is not None:
                    assert len(b.why.split()) >= 3, f"{page.name}: say why a block cannot run"
                    continue
                assert b.lang == "bash", f"{page.name}: a JSON block with no way to run: mark it not runnable"
                reader.run(b)
                ran += 1
        finally:
            reader.close()
    assert ran >= 2


@pytest.mark.parametrize("page", [ROOT / "README.md", ROOT / "docs" / "getting-started.md"])
def test_the_worked_example_sends_what_it_shows(tmp_path: Path, page: Path) -> None:
    reader = Reader(tmp_path)
    try:
        for b in blocks():
            if b.page == page and b.why is None and b.lang == "bash":
                reader.run(b)
    finally:
        reader.close()
    assert reader.sent >= 4  # the stores and the recalls reached the server
