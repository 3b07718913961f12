import pytest

from engram.kernel.errors import Forbidden, InvalidInput
from engram.kernel.scopes import check_path, check_selector, is_registered, matches, narrow, write_paths


def test_dnf_matching_is_and_within_clause_or_across() -> None:
    tags = ["org/acme/user/alice", "project/support"]
    assert matches(tags, [["org/acme"], ["nothing"]])
    assert matches(tags, [["org/acme", "project/support"]])
    assert not matches(tags, [["org/acme", "project/billing"]])
    assert not matches(["org/acmecorp"], [["org/acme"]])  # prefix must end at a segment


def test_narrow_intersects_lens_with_grant_and_never_widens() -> None:
    assert narrow(None, ["org/acme"]) == [["org/acme"]]
    assert narrow([["org"]], ["org/acme"]) == [["org/acme"]]
    assert narrow([["org/acme/user/alice"]], ["org/acme"]) == [["org/acme/user/alice"]]
    with pytest.raises(Forbidden):
        narrow([["org/globex"]], ["org/acme"])


def test_write_paths_must_lie_inside_grant() -> None:
    assert write_paths(None, ["org/acme"]) == ["org/acme"]
    assert write_paths([["org/acme/user/alice"]], ["org/acme"]) == ["org/acme/user/alice"]
    with pytest.raises(Forbidden):
        write_paths([["org"]], ["org/acme"])  # an ancestor of the grant would widen it


def test_selector_shape_and_path_syntax_are_checked() -> None:
    for bad in ([], [[]], ["org/acme"], [["bad path"]], [["/abs"]]):
        with pytest.raises(InvalidInput):
            check_selector(bad)  # type: ignore[arg-type]


def test_registered_paths_cover_their_ancestors() -> None:
    reg = ["org/acme/user/alice"]
    assert is_registered("org/acme", reg)
    assert is_registered("org/acme/user/alice", reg)
    assert not is_registered("org/acme/user/bob", reg)


@pytest.mark.parametrize(
    "bad",
    [
        "org/acme/x\n",  # `$` in a regex matches before a trailing newline: fullmatch does not
        "org/acme/x\r",
        "org/\nacme",
        "org/acme/../globex",
        "org/./acme",
        "..",
        ".",
        "org//acme",
        "org/acme/",
        "",
        " org/acme",
        "org/acme\x00",
        "org/ac me",
        "org/" + "a" * 300,
    ],
)
def test_malformed_paths_are_refused(bad: str) -> None:
    with pytest.raises(InvalidInput):
        check_path(bad)


@pytest.mark.parametrize("good", ["org/acme/user/alice", "a", "org/acme/user/a.b@c:d-e_f", "v1.2/x"])
def test_well_formed_paths_pass(good: str) -> None:
    assert check_path(good) == good
