"""Causantic's tools: plain text in the seed's formats, over MCP."""

from __future__ import annotations

from mcp.types import TextContent

from engram.kernel.clock import parse_time
from tests.conftest import Live
from tests.functional.mcpclient import connect

APOLLO = [["org/acme/project/apollo"]]


async def text(c: object, tool: str, **args: object) -> str:
    r = await c.call_tool(tool, args)  # type: ignore[attr-defined]
    assert not r.is_error, r
    block = r.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def test_causantic_tools(live: Live) -> None:
    async with connect(live.url, live.keys.agent) as c:
        for i, (sess, when, content) in enumerate(
            [
                ("c-s1", "2025-02-06T15:00:00Z", "We chose Postgres for the Apollo ledger because of transactions."),
                ("c-s1", "2025-02-06T15:10:00Z", "The ledger service exposes a gRPC API."),
                ("c-s2", "2025-02-07T10:00:00Z", "Authentication uses short-lived JWTs signed by the gateway."),
                ("c-s3", "2025-02-08T14:30:00Z", "We moved the ledger migrations into a separate job."),
            ]
        ):
            r = await c.call_tool(
                "memory_store", {"content": content, "session_id": sess, "said_at": when, "scopes": APOLLO}
            )
            assert not r.is_error, (i, r)

        projects = await text(c, "list-projects")
        assert projects.startswith("Projects in memory:")
        assert "- org/acme/project/apollo (4 chunks, Feb 2025)" in projects

        sessions = await text(c, "list-sessions", project="apollo")
        assert sessions.splitlines()[0] == 'Sessions for "apollo" (3 total):'
        assert "- c-s1 (Feb 6, 3:00 PM – 3:10 PM, 2 chunks," in sessions
        assert await text(c, "list-sessions", project="nope") == 'No sessions found for project "nope".'
        window = await text(c, "list-sessions", project="apollo", **{"from": "2025-02-07T00:00:00Z"})
        assert "c-s1" not in window and "c-s3" in window

        found = await text(c, "recall", query="why Postgres for the ledger", range="long", project="apollo")
        assert found.startswith("Found ") and "relevant memory chunks (" in found and "Postgres" in found
        short = await text(c, "recall", query="why Postgres for the ledger", range="short", project="apollo")
        assert "Postgres" in short  # the three sessions are the most recent ones
        why = await text(c, "explain", topic="authentication")
        assert "JWT" in why
        pred = await text(c, "predict", context="ledger migrations")
        assert pred.startswith("Potentially relevant context (")
        none = await text(c, "recall", query="quantum chromodynamics", project="org/acme/project/none")
        assert none == "No relevant memory found."

        rebuilt = await text(c, "reconstruct", project="apollo")
        assert rebuilt.index("Session c-s1") < rebuilt.index("Session c-s2") < rebuilt.index("Session c-s3")
        prev = await text(c, "reconstruct", project="apollo", previous_session=True, current_session_id="c-s3")
        assert "Session c-s2" in prev and "c-s3" not in prev
        err = await text(c, "reconstruct", project="apollo", previous_session=True)
        assert err.startswith("Error: ")
        one = await text(c, "reconstruct", project="apollo", session_id="c-s1")
        assert "gRPC" in one and "JWT" not in one


async def test_reconstruct_keeps_newest_within_budget(live: Live) -> None:
    budget = live.engram.causantic.budget
    live.engram.causantic.budget = 60
    try:
        async with connect(live.url, live.keys.agent) as c:
            for i in range(6):
                await c.call_tool(
                    "memory_store",
                    {
                        "content": f"Step {i}: " + "detail " * 20,
                        "session_id": "c-long",
                        "said_at": f"2025-03-01T10:0{i}:00Z",
                        "scopes": APOLLO,
                    },
                )
            newest = await text(c, "reconstruct", project="apollo", session_id="c-long")
            oldest = await text(c, "reconstruct", project="apollo", session_id="c-long", keep_newest=False)
        assert "Step 5" in newest and "Step 0" not in newest and "truncated" in newest
        assert "Step 0" in oldest and "Step 5" not in oldest
        assert "earlier context truncated" in newest and "earlier context truncated" not in oldest
        assert oldest.endswith("[later context truncated to fit the token budget]")
    finally:
        live.engram.causantic.budget = budget


async def test_causantic_failures_are_json_rpc_errors_naming_the_tool(live: Live) -> None:
    """Causantic's document: tool errors are JSON-RPC errors, code -32002, with the tool's name; reconstruct
    answers `Error: ...` text; Spectron's tools keep isError results."""
    from mcp.shared.exceptions import MCPError

    live.engram.identity.register_scopes("acme", ["org/acme/team/zephyr", "org/acme/project/zephyr"])
    async with connect(live.url, live.keys.agent) as c:
        for path in ("org/acme/team/zephyr", "org/acme/project/zephyr"):  # two projects named "zephyr"
            await c.call_tool("memory_store", {"content": "Zephyr notes.", "scopes": [[path]]})
        for tool, args in (
            ("recall", {"query": "ledger", "project": "zephyr"}),
            ("explain", {"topic": "   "}),
            ("predict", {"context": "ledger", "project": "zephyr"}),
            ("list-sessions", {"project": "zephyr"}),
        ):
            try:
                await c.call_tool(tool, args)
            except MCPError as exc:
                assert exc.error.code == -32002, (tool, exc.error)
                assert exc.error.message.startswith(f"{tool}: "), exc.error.message
                assert exc.error.data["tool"] == tool and exc.error.data["status"] in (400, 403)
            else:
                raise AssertionError(f"{tool} did not fail")
        text_error = await text(c, "reconstruct", project="zephyr")
        assert text_error.startswith("Error: ")
        spectron = await c.call_tool("memory_recall", {"query": "ledger", "lens": [["org/globex"]]})
        assert spectron.is_error and spectron.structured_content["error"]["status"] == 403  # type: ignore[index]


def test_recall_is_relevance_first_with_a_floor(engram: object) -> None:
    """In a small project, `recall` with only a query answers the relevant chunks, not the most recent
    ones; a query about nothing stored answers "No relevant memory found." though memories are visible."""
    from engram.families.memory.service import Turn
    from engram.kernel.caller import ANY
    from engram.wiring import Engram

    assert isinstance(engram, Engram)
    engram.identity.register_scopes("acme", ["org/acme/project/atlas"])
    _, p = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = engram.identity.enter(p, "acme", ANY, "t")
    said = [
        "We picked Postgres for the billing ledger because it has real transactions.",
        *[f"Stand-up {i}: the frontend team polished the settings page colours." for i in range(9)],
        "The release train leaves every second Thursday.",
    ]
    for i, content in enumerate(said):
        turn = Turn(content, session_id=f"s{i}", said_at=parse_time(f"2025-05-{i + 1:02d}T10:00:00Z"))
        engram.memory.store(caller, turn, [["org/acme/project/atlas"]])
    found = engram.causantic.recall(caller, "which database did we choose for billing", "long", "atlas")
    assert found.startswith("Found ") and "Postgres" in found
    assert "settings page" not in found  # recent, but not about the question
    assert (
        engram.causantic.recall(caller, "quantum chromodynamics lattice", "long", "atlas")
        == "No relevant memory found."
    )
    assert engram.causantic.predict(caller, "opera singers of Milan", "atlas").startswith("No ")


def test_short_range_prefers_recent_context_but_never_answers_with_what_is_not_relevant(engram: object) -> None:
    """Issue #23: with recent sessions about something else, "how does the authentication system work?" with
    the default `range: "short"` answered two unrelated recent turns and none of the three authentication turns
    from a few days before. Relevant chunks are answered whatever their age, the recent ones first; a turn that
    shares nothing with the question is not answered at all."""
    from engram.families.memory.service import Turn
    from engram.kernel.caller import ANY
    from engram.wiring import Engram

    assert isinstance(engram, Engram)
    engram.identity.register_scopes("acme", ["org/acme/project/gate"])
    _, p = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = engram.identity.enter(p, "acme", ANY, "t")
    said = [
        ("auth", "2025-06-02T09:00:00Z", "The authentication system issues short-lived JWTs from the gateway."),
        ("auth", "2025-06-02T09:05:00Z", "Refresh tokens rotate on every use; authentication fails closed."),
        ("auth", "2025-06-02T09:10:00Z", "Login goes through the authentication service, then the session store."),
        ("pref", "2025-06-05T09:00:00Z", "Please always answer me concisely and directly."),
        ("dash", "2025-06-06T09:00:00Z", "Started work on the dashboard charts."),
        ("dash2", "2025-06-06T15:00:00Z", "The charts use a dark palette for the weekly view."),
        ("lunch", "2025-06-07T12:00:00Z", "Lunch order: two pizzas and a salad."),
    ]
    for session, when, content in said:
        turn = Turn(content, session_id=session, said_at=parse_time(when))
        engram.memory.store(caller, turn, [["org/acme/project/gate"]])
    answer = engram.causantic.recall(caller, "how does the authentication system work?", project="gate")
    assert answer.startswith("Found 3 relevant"), answer
    for content in ("short-lived JWTs", "Refresh tokens rotate", "Login goes through"):
        assert content in answer
    for unrelated in ("concisely", "dashboard charts", "dark palette", "pizzas"):
        assert unrelated not in answer
    # recent and relevant: the best match first
    charts = engram.causantic.recall(caller, "what palette do the dashboard charts use", project="gate")
    assert charts.startswith("Found 2 relevant") and "dark palette" in charts.split("\n\n")[1], charts
