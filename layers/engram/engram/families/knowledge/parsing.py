"""Turn uploaded bytes into text blocks (section, page) with real parsers: plain text, Markdown, HTML
(BeautifulSoup), PDF (pypdf), DOCX (python-docx). A corrupt or unsupported file raises InvalidInput
naming the file; nothing is stored before parsing succeeds."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engram.kernel.errors import InvalidInput

TEXT, MARKDOWN, HTML, PDF, DOCX = (
    "text/plain",
    "text/markdown",
    "text/html",
    "application/pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
)
SUPPORTED = (TEXT, MARKDOWN, HTML, PDF, DOCX)
_BY_EXTENSION = {
    ".txt": TEXT,
    ".text": TEXT,
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
    ".html": HTML,
    ".htm": HTML,
    ".pdf": PDF,
    ".docx": DOCX,
}
_ALIASES = {"text/x-markdown": MARKDOWN, "application/xhtml+xml": HTML, "application/x-pdf": PDF}


@dataclass(frozen=True)
class Block:
    text: str
    section: str = ""
    page: int | None = None


def detect(data: bytes, mime_type: str | None, filename: str | None) -> str:
    """The content type: the declared one when given, else the extension, else the magic bytes."""
    if mime_type:
        mt = _ALIASES.get(mime_type.split(";")[0].strip().lower(), mime_type.split(";")[0].strip().lower())
        if mt not in SUPPORTED:
            raise InvalidInput(
                f"{filename or 'document'}: unsupported type {mime_type!r}; supported: " + ", ".join(SUPPORTED),
                code="unsupported_media_type",
            )
        return mt
    if filename:
        ext = "." + filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
        if ext in _BY_EXTENSION:
            return _BY_EXTENSION[ext]
    if data.startswith(b"%PDF"):
        return PDF
    if data.startswith(b"PK\x03\x04"):
        return DOCX
    head = data[:512].lower()
    if b"<html" in head or b"<!doctype html" in head:
        return HTML
    return TEXT


def parse(data: bytes, mime_type: str, name: str) -> list[Block]:
    try:
        if mime_type == PDF:
            blocks = _pdf(data)
        elif mime_type == DOCX:
            blocks = _docx(data)
        else:
            text = _decode(data, name)
            blocks = _html(text) if mime_type == HTML else _markdown(text) if mime_type == MARKDOWN else _plain(text)
    except InvalidInput:
        raise
    except Exception as exc:  # the parsers' own errors: a corrupt file
        raise InvalidInput(
            f"{name}: cannot be read as {mime_type} ({type(exc).__name__})", code="corrupt_file"
        ) from exc
    blocks = [b for b in blocks if b.text.strip()]
    if not blocks:
        raise InvalidInput(f"{name}: no text could be extracted", code="empty_document")
    return blocks


def _decode(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{name}: not UTF-8 text", code="corrupt_file") from exc


def _plain(text: str) -> list[Block]:
    return [Block(text)]


_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.+?)\s*#*\s*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)\s*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_NOT_A_TITLE = re.compile(r"^ {0,3}([-*+>]|\d+[.)]|=+\s*$|-+\s*$)")  # list items, quotes, rules: no setext title


def _markdown(text: str) -> list[Block]:
    """ATX (`# A`) and setext (`A` over `===` or `---`) headings name the sections; a line inside a fenced
    code block is text, whatever it starts with (`# install` in a shell snippet is a comment); so is YAML
    front matter."""
    blocks: list[Block] = []
    section, lines = "", list[str]()
    fence = ""  # the fence that opened the code block we are in
    rows = text.splitlines()
    if rows and rows[0].strip() == "---":  # YAML front matter: text, and its closing --- underlines nothing
        end = next((i for i, r in enumerate(rows[1:], 1) if r.strip() in ("---", "...")), 0)
        lines, rows = rows[: end + 1], rows[end + 1 :]
    for line in rows:
        opened = _FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
            lines.append(line)
            continue
        if opened:
            fence = opened.group(1)
            lines.append(line)
            continue
        m = _HEADING.match(line)
        underline = _SETEXT.match(line)
        if m or (underline and lines and lines[-1].strip() and not _NOT_A_TITLE.match(lines[-1])):
            title = m.group(2) if m else lines.pop().strip()
            if any(x.strip() for x in lines):
                blocks.append(Block("\n".join(lines).strip(), section))
            section, lines = title, []
        else:
            lines.append(line)
    if lines:
        blocks.append(Block("\n".join(lines).strip(), section))
    return blocks


def _html(text: str) -> list[Block]:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(text, "html.parser")
    for tag in soup(["script", "style", "noscript", "template", "svg", "nav", "footer"]):  # code, menus, footers
        tag.decompose()
    blocks: list[Block] = []
    section = soup.title.get_text(" ", strip=True) if soup.title else ""
    body = soup.body or soup
    for el in body.find_all(["h1", "h2", "h3", "h4", "h5", "h6", "p", "li", "pre", "td", "blockquote"]):
        text_ = el.get_text(" ", strip=True)
        if el.name and el.name.startswith("h") and len(el.name) == 2:
            section = text_
        elif (text_ and not el.find_parent(["li", "td", "blockquote"])) or el.name in ("li", "td"):
            blocks.append(Block(text_, section))
    if not blocks:
        blocks.append(Block(body.get_text(" ", strip=True), section))
    return blocks


HEADING_SCALE = 1.15  # a PDF line whose text is all set this much larger than the body text is a heading
HEADING_MAX_CHARS = 120
_LEADER = re.compile(r"(\s*\.){3,}\s*\d*\s*$")
# pypdf logs what it repairs or cannot read; a file that fails is reported by its name instead
logging.getLogger("pypdf").setLevel(logging.ERROR)


def _pdf(data: bytes) -> list[Block]:
    """Pages in order; a line set larger than the document's body text (the size most of its characters
    have) is a heading: it names the section of the text after it, across pages, until the next one. Where
    no heading has been seen, the section is the page ("Page 3"). Every block keeps its page number."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        raise InvalidInput("encrypted PDF", code="corrupt_file")
    pages = [_pdf_lines(page) for page in reader.pages]
    weight: dict[float, int] = {}
    for lines in pages:
        for line, size in lines:
            weight[size] = weight.get(size, 0) + len(line.strip())
    body = max(weight, key=lambda size: (weight[size], -size)) if weight else 0.0
    blocks: list[Block] = []
    section = ""
    for number, lines in enumerate(pages, start=1):
        text: list[str] = []
        heading = 0.0  # the size of the heading on the line before, if that line was one
        for line, size in lines:
            words = " ".join(line.split())
            if (
                body
                and size >= body * HEADING_SCALE
                and len(words) <= HEADING_MAX_CHARS
                and any(c.isalpha() for c in words)
            ):
                if text:
                    blocks.append(Block("\n".join(text), section or f"Page {number}", number))
                    text = []
                words = _LEADER.sub("", words)  # a table of contents' dotted leader and page number
                # a heading set on two lines keeps its size; a smaller one right after it is a subsection
                section = f"{section} {words}" if heading == size else words
                heading = size
            elif words:
                text.append(line.strip())
                heading = 0.0
        blocks.append(Block("\n".join(text), section or f"Page {number}", number))
    return blocks


def _pdf_lines(page: Any) -> list[tuple[str, float]]:
    """A page's text lines as pypdf extracts them, each with the smallest font size its text is set in
    (the font size times the text and page matrices' scale, in points, to a tenth)."""
    runs: list[tuple[str, float]] = []

    def visit(text: str, cm: Sequence[float], tm: Sequence[float], font: Any, size: float) -> None:
        runs.append((text, round(float(size or 0) * _scale(tm) * _scale(cm), 1)))

    page.extract_text(visitor_text=visit)
    lines: list[tuple[str, float]] = []
    parts: list[str] = []
    smallest = 0.0
    for text, size in runs:
        for k, piece in enumerate(text.split("\n")):
            if k:
                lines.append(("".join(parts), smallest))
                parts, smallest = [], 0.0
            parts.append(piece)
            if piece.strip():
                smallest = size if not smallest else min(smallest, size)
    lines.append(("".join(parts), smallest))
    return lines


def _scale(matrix: Sequence[float]) -> float:
    """How much a PDF matrix (a b c d e f) scales lengths: the square root of its determinant."""
    a, b, c, d = (float(x) for x in matrix[:4])
    return abs(a * d - b * c) ** 0.5 or 1.0


def _docx(data: bytes) -> list[Block]:
    import docx
    from docx.table import Table

    document = docx.Document(io.BytesIO(data))
    blocks: list[Block] = []
    section = ""
    for part in document.iter_inner_content():  # paragraphs and tables in reading order
        if isinstance(part, Table):
            for row in part.rows:
                cells = [c.text.strip() for c in row.cells if c.text.strip()]
                if cells:
                    blocks.append(Block(" | ".join(cells), section or "Table"))
            continue
        style = (part.style.name if part.style is not None else "") or ""
        if style.lower().startswith(("heading", "title")):
            section = part.text.strip()
        elif part.text.strip():
            blocks.append(Block(part.text, section))
    return blocks
