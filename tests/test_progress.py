"""The overall progress bar: counts, the estimate of the time left, the finish line."""

from __future__ import annotations

import io

from hypothesis import given, strategies as st
from rich.console import Console

from servekit.progress import clock, estimate_left, overall


def test_the_estimate_is_the_mean_pace_times_what_is_left() -> None:
    assert estimate_left(60.0, 3, 12) == 180.0
    assert estimate_left(60.0, 12, 12) == 0.0
    assert estimate_left(0.0, 0, 12) is None  # nothing done yet: no estimate
    assert estimate_left(10.0, 0, 12) is None


@given(
    elapsed=st.floats(min_value=0.001, max_value=1e6),
    done=st.floats(min_value=0.001, max_value=1e4),
    total=st.floats(min_value=0, max_value=1e4),
)
def test_the_estimate_is_never_negative(elapsed: float, done: float, total: float) -> None:
    left = estimate_left(elapsed, done, total)
    assert left is not None and left >= 0


def test_clock_reads_like_a_person_writes() -> None:
    assert clock(12.4) == "12s"
    assert clock(245) == "4m05s"
    assert clock(3725) == "1h02m"


def test_overall_counts_units_and_says_when_it_finished() -> None:
    console = Console(width=100, file=io.StringIO(), color_system=None)
    with overall("accept", total=3, console=console) as bar:
        bar.advance(what="api.sse")
        bar.add_total(1)
        bar.advance(3, what="needle 1m")
        assert (bar.completed, bar.total) == (4, 4)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "accept: finished in" in out and "4/4" in out and "done" in out


def test_a_disabled_bar_draws_nothing_and_still_counts() -> None:
    console = Console(width=100, file=io.StringIO(), color_system=None)
    with overall("verify", total=5, console=console, enabled=False) as bar:
        bar.advance(2)
        assert bar.completed == 2
    assert console.file.getvalue() == ""  # type: ignore[attr-defined]
