"""Calibration reaches the target within max(128, N/200) tokens in at most 6 tries."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings, strategies as st

from servekit.accept.calibrate import MAX_ITERATIONS, calibrate, tolerance


def test_tolerance_is_the_seeds_rule() -> None:
    assert tolerance(2048) == 128
    assert tolerance(147456) == 737
    assert tolerance(1048576) == 5242


@settings(max_examples=200)
@given(
    st.integers(min_value=1024, max_value=1_048_576),
    st.floats(min_value=1.5, max_value=8.0),
    st.integers(min_value=0, max_value=400),
)
def test_converges_for_any_chars_per_token_and_overhead(
    target: int, chars_per_token: float, overhead: int
) -> None:
    calls: list[int] = []

    async def count(chars: int) -> int:
        calls.append(chars)
        return overhead + int(chars / chars_per_token)

    found = asyncio.run(calibrate(target, count))
    assert found is not None
    assert found.within, found
    assert len(calls) == found.iterations <= MAX_ITERATIONS
    # Every /tokenize answer is kept as evidence, in the order asked.
    assert [c for c, _ in found.tries] == calls
    assert found.tries[-1] == (found.chars, found.tokens)


def test_a_failing_tokenizer_gives_none() -> None:
    async def count(chars: int) -> int | None:
        return None

    assert asyncio.run(calibrate(4096, count)) is None


def test_an_unreachable_target_returns_the_closest_try_outside_tolerance() -> None:
    async def count(chars: int) -> int:
        return 10_000  # does not depend on the filler at all

    found = asyncio.run(calibrate(4096, count))
    assert found is not None
    assert not found.within
    assert found.iterations == 1 or found.tokens == 10_000
    assert len(found.tries) == MAX_ITERATIONS
    assert found.trail().count("->") == MAX_ITERATIONS
