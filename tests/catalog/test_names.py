"""A layout's name by its parts (issue 46): one pattern, one type, no name split by hand."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, strategies as st

from servekit.catalog import LAYOUT_NAME, LayoutName

PART = st.from_regex(r"[a-z0-9][a-z0-9.-]{0,12}", fullmatch=True)


def test_the_two_shapes_of_a_name() -> None:
    imported = LayoutName.parse("a3/glm5.1/1x2p1x4d")
    assert (imported.hardware, imported.model, imported.topology) == ("a3", "glm5.1", "1x2p1x4d")
    assert imported.has_model and imported.family == "glm5.1-a3"
    assert str(imported.with_leaf("2p2d")) == "a3/glm5.1/2p2d"
    hand_made = LayoutName.parse("a3/1p1d")
    assert (hand_made.hardware, hand_made.model, hand_made.leaf) == ("a3", None, "1p1d")
    assert hand_made.topology is None and not hand_made.has_model
    with pytest.raises(ValueError, match="a3/1p1d"):
        hand_made.parts3  # noqa: B018 - the property refuses


@pytest.mark.parametrize(
    "name", ["a3", "a3/", "A3/1p1d", "a3/x/y/z", "a3/../x", "a3/.x", "a3/1p1d\n", "", "a3//x"]
)
def test_what_is_not_a_name_is_refused_in_one_line(name: str) -> None:
    with pytest.raises(ValueError) as err:
        LayoutName.parse(name)
    assert "is not a layout name" in str(err.value) and "\n" not in str(err.value)


@given(st.lists(PART, min_size=1, max_size=2), st.from_regex(r"[a-z0-9-]{1,8}", fullmatch=True))
def test_every_name_of_the_pattern_reads_back_whole(rest: list[str], hardware: str) -> None:
    name = "/".join([hardware, *rest])
    assert re.fullmatch(LAYOUT_NAME, name)
    assert str(LayoutName.parse(name)) == name
