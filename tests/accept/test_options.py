"""AcceptOptions validates itself: a bad value is one UsageError naming its flag."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from servekit.accept import AcceptOptions
from servekit.accept.registry import all_checks, select
from servekit.errors import UsageError


def test_defaults_live_in_the_model() -> None:
    options = AcceptOptions()
    assert options.contexts == (147456, 1048576)
    assert options.needle_depths == (0.5, 0.5, 0.5, 0.5)
    assert AcceptOptions(context=()).contexts == ()  # no contexts: no needle checks


@pytest.mark.parametrize(
    ("fields", "flag"),
    [
        ({"context": ("12q",)}, "--context"),
        ({"depths": "0.1,0.2"}, "--depths"),
    ],
)
def test_a_bad_value_names_its_flag(fields: dict[str, object], flag: str) -> None:
    with pytest.raises(UsageError, match=flag):
        AcceptOptions.model_validate(fields)


@pytest.mark.parametrize(
    ("fields", "flag"),
    [
        ({"only": ("nosuchcheck",)}, "--only nosuchcheck"),
        ({"only": ("needle.2k",), "context": ("144k",)}, "--only needle.2k"),
    ],
)
def test_only_is_checked_where_the_checks_are_selected(
    fields: dict[str, object], flag: str
) -> None:
    """The options no longer load the checks (they read the options: a circle); the runner's
    selection refuses a typo in one line, before anything is sent (test_cli: exit 2)."""
    options = AcceptOptions.model_validate(fields)
    with pytest.raises(UsageError, match=flag):
        select(all_checks(options), options.only)


@given(st.text(alphabet="0123456789kmKM,. x-", max_size=12))
def test_any_context_text_parses_or_is_refused_naming_the_flag(text: str) -> None:
    try:
        options = AcceptOptions(context=(text,))
    except UsageError as exc:
        assert str(exc).startswith("--context ") and "\n" not in str(exc)
    else:
        assert all(size > 0 for size in options.contexts)


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=0, max_size=6))
def test_any_depths_parse_to_four_in_range_or_are_refused(values: list[float]) -> None:
    text = ",".join(map(str, values))
    try:
        options = AcceptOptions(depths=text)
    except UsageError as exc:
        assert str(exc).startswith("--depths ")
    else:
        assert len(options.needle_depths) == 4
        assert all(0.0 <= d <= 1.0 for d in options.needle_depths)
