"""#50, the Cortex seed's entity examples whole again, on both adapter sets, replayed as its client would: two
mentions count two; `entity_search "software engineer"` finds Jane Smith first, not the acronyms of a technical
text (which are no entities without something that says so); "Jane Smith is a software engineer at Acme
Corporation" is a works_at edge; and a search never ranks an entity by another scope's words."""

from __future__ import annotations

from engram.families.knowledge.documents import NewDocument
from engram.families.memory.base import Turn
from engram.wiring import Engram
from tests.contract.conftest import ALICE, BOB, two_agents

AUTH_GUIDE = (b"To configure OAuth, first create an application. SAML single sign-on needs the redirect URI and the "
              b"client ID. The FBI and NASA's engineers use it too.")  # fmt: skip


def test_the_cortex_examples(both: Engram) -> None:
    e, (alice, _) = both, two_agents(both)
    e.conversation.append(alice, "t1", "user", "Jane Smith is a software engineer at Acme Corporation.", None)
    e.conversation.append(alice, "t2", "user", "I had lunch with Jane Smith yesterday.", None)
    e.documents.ingest(alice, NewDocument(AUTH_GUIDE, "Auth guide"))
    e.queue.join()
    jane = e.entities.query(alice, "Jane Smith", None)["entity"]
    assert jane["mention_count"] == 2 and "software engineer" in jane["description"]
    found = e.entities.search(alice, "software engineer", None, 5)["results"]
    assert found[0]["name"] == "Jane Smith", found
    names = {x["name"]: x["type"] for x in e.entities.list(alice, None, "name", 100, 0)["entities"]}
    assert not {"SAML", "URI", "ID", "OAuth"} & set(names), names  # technical terms, nothing says organisation
    assert names.get("FBI") == names.get("NASA") == "Organization"  # "the FBI", "NASA's"
    [works] = e.entities.relationships(alice, jane["id"], "outgoing", None)["relationships"]
    assert (works["type"], works["target"]["name"]) == ("works_at", "Acme Corporation")


def test_a_search_never_ranks_an_entity_by_another_scopes_words(both: Engram) -> None:
    e, (alice, bob) = both, two_agents(both)
    e.memory.store(alice, Turn("My sister is Jane Smith, the beekeeper."), [[ALICE]])
    e.documents.ingest(bob, NewDocument(b"Jane Smith is a software engineer at Acme Corporation.", "org chart"))
    e.queue.join()
    for who, theirs in ((alice, "software engineer"), (bob, "sister beekeeper")):
        hits = e.entities.search(who, theirs, None, 5)["results"]
        assert all(h["name"] != "Jane Smith" for h in hits), (who.principal.grant, hits)
    assert BOB in e.records.get("acme", "entity", e.entities.query(bob, "Jane Smith", None)["entity"]["id"]).data[
        "scopes"]  # type: ignore[union-attr]  # fmt: skip
