"""safeyaml's alias bounds, in values and in bytes, against bombs of random shape.

Each bomb is a document whose expanded size is computed here by construction
(a string of ``width`` characters aliased ``fanout`` times, nested ``levels``
deep); the reader must refuse exactly those past a bound, before constructing
anything, and accept the same shapes just inside it (the positive control).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from servekit import safeyaml
from servekit.errors import UsageError


def string_bomb(width: int, fanout: int, levels: int) -> tuple[str, int, int]:
    """A document, and the values and bytes of scalar text it holds with aliases expanded."""
    lines = [f'a0: &a0 "{"x" * width}"']
    total, values = 2 + width, 3  # the mapping, key "a0" and its value
    inner, inner_values = width, 1
    for level in range(1, levels + 1):
        refs = ", ".join([f"*a{level - 1}"] * fanout)
        lines.append(f"a{level}: &a{level} [{refs}]")
        inner, inner_values = inner * fanout, 1 + inner_values * fanout
        total += len(f"a{level}") + inner
        values += 1 + inner_values
    return "\n".join(lines) + "\n", values, total


def test_a_long_string_aliased_thousands_of_times_is_refused_in_bytes() -> None:
    text, _, _ = string_bomb(50_000, 2_000, 1)
    assert len(text) < 70_000
    with pytest.raises(UsageError, match="expands to more than 1024 KiB of text"):
        safeyaml.compose(text, "bomb.yaml")


def test_the_same_text_written_out_is_accepted() -> None:
    """Positive control: a document near the byte bound without aliases reads."""
    text = "a: " + '"' + "x" * (safeyaml.MAX_BYTES - 100) + '"\n'
    _, data = safeyaml.compose(text, "big.yaml")
    assert len(data["a"]) == safeyaml.MAX_BYTES - 100


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=0, max_value=40_000),
    st.integers(min_value=1, max_value=40),
    st.integers(min_value=1, max_value=3),
)
def test_bombs_of_random_shape_are_refused_exactly_past_a_bound(
    width: int, fanout: int, levels: int
) -> None:
    text, values, expanded = string_bomb(width, fanout, levels)
    assert values < safeyaml.MAX_VALUES  # these shapes test the byte bound only
    if expanded > safeyaml.MAX_EXPANDED_BYTES:
        with pytest.raises(UsageError, match="KiB of text through its aliases"):
            safeyaml.compose(text, "bomb.yaml")
    else:
        _, data = safeyaml.compose(text, "bomb.yaml")
        assert isinstance(data, dict)
