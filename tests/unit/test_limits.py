"""The one limit policy (`engram.kernel.limits`), checked over every operation the registry declares: so that the next
family cannot add a free-form field, a string or a list without a bound (issue #22, class 8: 5 MB of entity
metadata was accepted), and what no argument may hold is refused naming its field."""

from __future__ import annotations

import typing
from typing import Any

import pytest
from annotated_types import MaxLen
from pydantic import BaseModel, JsonValue

from engram.families import select
from engram.kernel.errors import InvalidInput
from engram.kernel.limits import BOUNDS, MAX_DEPTH, Bounded, check_arguments, depth_of, scrub

FREE_FORM = (Any, JsonValue, dict)


def _models(tp: Any) -> list[type[BaseModel]]:
    out = [tp] if isinstance(tp, type) and issubclass(tp, BaseModel) else []
    for arg in typing.get_args(tp):
        out += _models(arg)
    return out


def _admits(tp: Any, kinds: tuple[Any, ...]) -> bool:
    """Whether the annotation `tp` (unions, lists, dicts walked) admits one of `kinds` somewhere."""
    if tp in kinds or typing.get_origin(tp) in kinds:
        return True
    return any(_admits(arg, kinds) for arg in typing.get_args(tp) if arg is not type(None))


def _annotations(tp: Any) -> list[Any]:
    """The `Annotated` metadata on the arms of a union (`Selector | None`: the selector's own bound)."""
    out: list[Any] = []
    for arg in typing.get_args(tp):
        out += list(getattr(arg, "__metadata__", ()))
        if typing.get_origin(arg) is typing.Annotated:
            for m in arg.__metadata__:
                out += list(getattr(m, "metadata", ()))
    return out


def _bounded_everywhere(tp: Any, seen: set[type[BaseModel]], where: str) -> list[str]:
    """The fields of a model (and of the models it holds) that break the policy."""
    out: list[str] = []
    for model in _models(tp):
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            at = f"{where}.{name}"
            ann = field.annotation
            meta = [*field.metadata, *_annotations(ann)]
            bounded = any(isinstance(m, Bounded) for m in meta)
            sized = any(isinstance(m, MaxLen) or getattr(m, "max_length", None) is not None for m in meta)
            if _models(ann):
                out += _bounded_everywhere(ann, seen, at)
                if _admits(ann, (list,)) and not sized:
                    out.append(f"{at}: a list without max_length")
                continue
            if _admits(ann, FREE_FORM) and not bounded:
                out.append(f"{at}: a free-form field without Bounded(...)")
            elif _admits(ann, (list,)) and not (sized or bounded):
                out.append(f"{at}: a list without max_length")
            elif _admits(ann, (str,)) and not (sized or bounded) and name != "context_id":
                arms = [a for a in typing.get_args(ann) if a is not type(None)]
                literal = typing.get_origin(ann) is typing.Literal or (
                    bool(arms) and all(typing.get_origin(a) is typing.Literal for a in arms)
                )
                if not literal:
                    out.append(f"{at}: a string without max_length")
    return out


def test_every_argument_of_every_operation_has_a_declared_bound() -> None:
    problems: list[str] = []
    seen: set[type[BaseModel]] = set()
    for op in select():
        problems += _bounded_everywhere(op.input, seen, op.name)
    assert problems == []


def test_the_walk_finds_an_unbounded_field() -> None:
    from engram.kernel.operation import OpInput, Selector

    class Loose(OpInput):
        meta: dict[str, Any] | None = None
        name: str = ""
        tags: list[str] | None = None
        scopes: Selector | None = None

    assert _bounded_everywhere(Loose, set(), "loose") == [
        "loose.meta: a free-form field without Bounded(...)",
        "loose.name: a string without max_length",
        "loose.tags: a list without max_length",
    ]


def test_free_form_fields_refuse_over_their_bound_naming_the_field_and_the_limit() -> None:
    [update] = [op for op in select() if op.name == "entity_update"]
    with pytest.raises(InvalidInput) as info:
        update.parse({"entity_id": "Person:x", "metadata": {"blob": "x" * (5 * 1024 * 1024)}})
    assert "metadata" in info.value.message and str(BOUNDS["metadata"].bytes) in info.value.message
    assert info.value.details["field"] == "metadata"
    deep: Any = "leaf"
    for _ in range(BOUNDS["metadata"].depth + 1):
        deep = {"d": deep}
    with pytest.raises(InvalidInput, match="metadata: nests"):
        update.parse({"entity_id": "Person:x", "metadata": deep})
    assert update.parse({"entity_id": "Person:x", "metadata": {"ok": [1, 2.5, "x", None, True]}})


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"a": ["ok", "\ud800"]}, "value.a[1] is not valid Unicode"),
        ({"\udfff": 1}, "is not valid Unicode"),
        ({"n": float("nan")}, "value.n is not a finite number"),
        ({"n": float("inf")}, "not a finite number"),
        ({"n": 2**64}, "value.n is an integer out of range"),
        (2**63, "value is an integer out of range"),
    ],
)
def test_what_no_argument_may_hold_is_refused_naming_it(value: Any, says: str) -> None:
    with pytest.raises(InvalidInput, match=says.replace("[", r"\[").replace("]", r"\]")):
        check_arguments({"value": value})


def test_nesting_deeper_than_the_limit_is_refused_and_scrub_mends_what_was_stored() -> None:
    deep: Any = []
    for _ in range(MAX_DEPTH + 2):
        deep = [deep]
    assert depth_of(deep) == MAX_DEPTH + 3
    with pytest.raises(InvalidInput, match="nests deeper"):
        check_arguments({"value": deep})
    check_arguments({"value": "\U0001f600", "n": 2**63 - 1, "f": 1e308})  # an astral character, the ranges' edges
    assert scrub({"a\ud800": ["x\udfffy", float("nan"), 1.5]}) == {"a\ufffd": ["x\ufffdy", None, 1.5]}


def test_the_manual_states_every_bound() -> None:
    from pathlib import Path

    section = (Path(__file__).resolve().parents[2] / "docs" / "limits.md").read_text()
    for kind, bound in BOUNDS.items():
        size = f"{bound.bytes // (1 << 20)} MiB" if bound.bytes % (1 << 20) == 0 else f"{bound.bytes // 1024} KiB"
        assert size in section, f"the manual's Limits page does not state {kind}'s {size}"
    assert f"at most {MAX_DEPTH} deep" in section
