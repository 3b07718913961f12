"""Parsers on real files, and the chunking strategies."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from engram.families.knowledge.chunking import chunk
from engram.families.knowledge.parsing import DOCX, HTML, MARKDOWN, PDF, TEXT, Block, detect, parse
from engram.kernel.errors import InvalidInput
from tests.fixtures.files import RETURNS_PDF, make_docx, make_pdf, make_pdf_with_headings


def test_pdf_pages_become_blocks_with_page_numbers() -> None:
    blocks = parse(make_pdf(RETURNS_PDF), PDF, "returns.pdf")
    assert [b.page for b in blocks] == [1, 2]
    assert "30 days of purchase" in blocks[1].text and blocks[1].section == "Page 2"


def test_pdf_headings_set_larger_than_the_body_become_sections() -> None:
    body = "The boiler must be serviced every twelve months by a certified technician, who signs the log."
    data = make_pdf_with_headings(
        [
            [("p", "This manual covers the house at 4 Elm Road."), ("h", "Boiler"), ("p", body)],
            [("h", "Heating"), ("h", "schedule"), ("p", "It runs from six to half past eight.")],
            [("p", "At weekends it runs from eight."), ("h", "Safety"), ("h2", "Gas . . . . . . . 4")],
            [("p", "Call the emergency line at once.")],
        ]
    )
    blocks = parse(data, PDF, "house.pdf")
    assert [(b.section, b.page, b.text) for b in blocks] == [
        ("Page 1", 1, "This manual covers the house at 4 Elm Road."),  # before any heading: the page
        ("Boiler", 1, body),
        ("Heating schedule", 2, "It runs from six to half past eight."),  # a heading set on two lines
        ("Heating schedule", 3, "At weekends it runs from eight."),  # the section goes on across pages
        ("Gas", 4, "Call the emergency line at once."),  # a subsection right after; the leader dropped
    ]


def test_docx_tables_keep_their_place_and_section() -> None:
    prices = [["Plan", "Price"], ["Basic", "5 EUR"]]
    data = make_docx({"Pricing": ["Plans are billed monthly.", prices, "Taxes are extra."], "Support": ["Email us."]})
    blocks = parse(data, DOCX, "plans.docx")
    assert [(b.section, b.text) for b in blocks] == [
        ("Pricing", "Plans are billed monthly."),
        ("Pricing", "Plan | Price"),
        ("Pricing", "Basic | 5 EUR"),  # under its own heading, where it stands, not after the last section
        ("Pricing", "Taxes are extra."),
        ("Support", "Email us."),
    ]


def test_docx_headings_become_sections() -> None:
    data = make_docx({"Setup": ["Install the agent."], "Usage": ["Run it daily.", "Check the logs."]})
    blocks = parse(data, DOCX, "guide.docx")
    assert [(b.section, b.text) for b in blocks] == [
        ("Setup", "Install the agent."),
        ("Usage", "Run it daily."),
        ("Usage", "Check the logs."),
    ]


def test_html_drops_scripts_and_keeps_headings() -> None:
    html = b"<html><head><title>T</title><script>var x=1</script></head><body><h1>Intro</h1><p>Hello there.</p>"
    html += b"<h2>Details</h2><ul><li>One</li><li>Two</li></ul></body></html>"
    blocks = parse(html, HTML, "page.html")
    assert [(b.section, b.text) for b in blocks] == [("Intro", "Hello there."), ("Details", "One"), ("Details", "Two")]
    assert all("var x" not in b.text for b in blocks)
    page = b"<body><nav><h2>Menu</h2><ul><li>Home</li><li>Blog</li></ul></nav><main><h1>Post</h1><p>Body.</p>"
    page += b"</main><footer><p>Copyright 2026</p></footer></body>"
    assert [(b.section, b.text) for b in parse(page, HTML, "post.html")] == [("Post", "Body.")]  # no menu, footer


def test_markdown_sections() -> None:
    blocks = parse(b"# A\nalpha\n\n## B\nbeta\n", MARKDOWN, "x.md")
    assert [(b.section, b.text) for b in blocks] == [("A", "alpha"), ("B", "beta")]


def test_markdown_code_fences_and_setext_headings() -> None:
    doc = b"""Install
=======
Run this:

```bash
# install the agent
pip install agent
```

Usage
-----
~~~
## not a heading
~~~
Then call it.

- a list item
---
after a rule
"""
    blocks = parse(doc, MARKDOWN, "readme.md")
    assert [b.section for b in blocks] == ["Install", "Usage"]  # a list item over a rule is no heading
    install, usage = blocks
    assert "# install the agent\npip install agent" in install.text  # the fenced comment stays text
    assert "## not a heading" in usage.text and usage.text.endswith("- a list item\n---\nafter a rule")
    front = parse(b"---\ntitle: Guide\ntags: [a]\n---\n# Setup\nInstall it.\n", MARKDOWN, "guide.md")
    assert [(b.section, b.text) for b in front] == [("", "---\ntitle: Guide\ntags: [a]\n---"), ("Setup", "Install it.")]


@pytest.mark.parametrize(
    ("data", "mime", "code"),
    [
        (b"%PDF-1.4 garbage that is not a pdf", PDF, "corrupt_file"),
        (b"PK\x03\x04 not a docx", DOCX, "corrupt_file"),
        (b"\xff\xfe\xfa not utf-8", TEXT, "corrupt_file"),
        (b"   ", TEXT, "empty_document"),
    ],
)
def test_bad_files_name_the_file(data: bytes, mime: str, code: str) -> None:
    with pytest.raises(InvalidInput) as e:
        parse(data, mime, "upload.bin")
    assert e.value.code == code and "upload.bin" in e.value.message


def test_detection_order() -> None:
    assert detect(b"%PDF-1.7", None, None) == PDF
    assert detect(b"hello", None, "notes.md") == MARKDOWN
    assert detect(b"<!DOCTYPE html><html>", None, None) == HTML
    with pytest.raises(InvalidInput) as e:
        detect(b"x", "image/png", "cat.png")
    assert e.value.code == "unsupported_media_type"


TEXT_BLOCK = Block(
    "Wings make lift. Lift depends on speed. Speed comes from engines.\n\n"
    "Rivets hold panels. Panels form the skin. The skin carries loads.",
    "Structure",
)


def test_paragraph_and_sentence_and_fixed_strategies() -> None:
    paras = chunk([TEXT_BLOCK], "paragraph", max_tokens=20, overlap=0)
    assert [c.text for c in paras] == [
        "Wings make lift. Lift depends on speed. Speed comes from engines.",
        "Rivets hold panels. Panels form the skin. The skin carries loads.",
    ]
    assert [c.position for c in paras] == [0, 1] and all(c.section == "Structure" for c in paras)
    sents = chunk([TEXT_BLOCK], "sentence", max_tokens=10, overlap=5)
    assert sents[0].text.startswith("Wings make lift.") and len(sents) > 2
    assert any(a.text.split(". ")[-1] in b.text for a, b in itertools.pairwise(sents))  # overlap
    fixed = chunk([TEXT_BLOCK], "fixed", max_tokens=8, overlap=2)
    assert all(len(c.text.split()) <= 6 for c in fixed) and len(fixed) > 3


def test_semantic_splits_where_the_topic_changes() -> None:
    def embed(texts: list[str]) -> np.ndarray:
        # sentences about flight point one way, about structure the other
        return np.array([[1.0, 0.0] if any(w in t for w in ("lift", "Lift", "Speed")) else [0.0, 1.0] for t in texts])

    parts = chunk([Block(TEXT_BLOCK.text.replace("\n\n", " "), "S")], "semantic", 200, 0, embed)
    assert [p.text for p in parts] == [
        "Wings make lift. Lift depends on speed. Speed comes from engines.",
        "Rivets hold panels. Panels form the skin. The skin carries loads.",
    ]


def test_a_broken_pdf_is_reported_by_name_without_pypdf_chatter(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(InvalidInput, match=r"broken\.pdf: cannot be read as application/pdf"):
        parse(b"\x00\x01garbage", PDF, "broken.pdf")
    assert [r.getMessage() for r in caplog.records if r.name.startswith("pypdf")] == []


@pytest.mark.parametrize("strategy", ["paragraph", "sentence", "fixed", "semantic"])
def test_text_with_nothing_to_split_at_still_makes_chunks_of_a_chunks_size(strategy: str) -> None:
    """A megabyte of one word (or a base64 blob) was one chunk of 262,144 tokens: too big for a DynamoDB item,
    and the model reads 256 of them. Now every chunk is at most twice the limit, and nothing is lost."""
    word = "A" * 1_000_000
    got = chunk([Block(word, "", None)], strategy, 256, 32)
    assert len(got) > 900 and max(c.tokens for c in got) <= 512 and "".join(c.text for c in got) == word
    blob = " ".join(f"{i:04d}" + "x" * 1500 for i in range(200))  # words too long for a window of 192 words
    got = chunk([Block(blob, "", None)], strategy, 256, 32)
    assert len(got) > 200 and max(c.tokens for c in got) <= 512
    assert {w[:4] for c in got for w in c.text.split() if w[:4].isdigit()} == {f"{i:04d}" for i in range(200)}
