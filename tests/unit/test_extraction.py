from engram.families.memory.extraction import extract


def facts(text: str) -> dict[str, str]:
    return {f.key: f.value for f in extract(text).facts}


def test_identity_forms() -> None:
    assert facts("Hi, my name is Alice and I live in Paris.") == {"name": "Alice", "location": "Paris"}
    assert facts("I am a software engineer at Acme Corp.") == {"role": "software engineer", "employer": "Acme Corp"}
    assert facts("I just got promoted to CTO.") == {"role": "CTO"}
    assert facts("I'm 34 years old") == {"age": "34"}


def test_preferences_and_context() -> None:
    got = facts("My favorite editor is Neovim. I love hiking and I hate meetings.")
    assert got == {"favorite_editor": "Neovim", "likes": "hiking", "dislikes": "meetings"}
    assert facts("I'm working on the Q3 roadmap review.") == {"current_task": "Q3 roadmap review"}
    # Spectron's own memory_profile example
    assert facts("I'm currently leading the Q3 roadmap review.") == {"current_task": "Q3 roadmap review"}
    assert facts("I am drafting the launch plan.") == {"current_task": "launch plan"}
    assert facts("I'm currently translating the user guide.") == {"current_task": "user guide"}
    assert facts("I'm planning to visit Rome.") == {"plan": "visit Rome"}
    assert facts("I'm currently going to the gym.") == {}
    assert facts("I'm a pilot.") == {"role": "pilot"}


def test_instructions_corrections_hedges_relations() -> None:
    ex = extract("Always answer concisely.")
    assert [(i.label, i.description) for i in ex.instructions] == [("length", "always answer concisely")]
    ex = extract("Actually, I moved to Berlin.")
    assert [(f.key, f.value, f.correction) for f in ex.facts] == [("location", "Berlin", True)]
    ex = extract("I think I might move to London.")
    assert ex.facts == [] and len(ex.uncertainties) == 1
    ex = extract("Ana is my sister and I work for Globex.")
    assert [(r.type, r.target) for r in ex.relations] == [("sister", "Ana")]
    assert facts("Ana is my sister and I work for Globex.") == {"employer": "Globex"}


def test_small_talk_extracts_nothing() -> None:
    ex = extract("I'm tired today. What's the weather like?")
    assert ex.facts == [] and ex.instructions == [] and ex.relations == []
