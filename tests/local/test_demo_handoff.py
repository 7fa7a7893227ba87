"""The demo's verdict on the decoder's prompt sources: all prompt tokens transferred, none computed."""

from __future__ import annotations

from hypothesis import given, strategies as st

from servekit.local.demo import Handoff


def test_a_full_transfer_with_nothing_computed_passes() -> None:
    assert Handoff(sent=1040, external=1040.0, local=0.0).ok


def test_a_silent_reprefill_or_a_partial_transfer_fails() -> None:
    assert not Handoff(sent=1040, external=0.0, local=1040.0).ok  # decoder re-ran prefill
    assert not Handoff(sent=1040, external=1024.0, local=16.0).ok  # only whole blocks moved
    assert not Handoff(sent=0, external=0.0, local=0.0).ok  # nothing was sent: proves nothing


@given(
    sent=st.integers(min_value=0, max_value=10**6),
    external=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    local=st.floats(min_value=0, max_value=1e6, allow_nan=False),
)
def test_ok_exactly_when_external_equals_sent_and_local_is_zero(
    sent: int, external: float, local: float
) -> None:
    want = sent > 0 and external == sent and local == 0
    assert Handoff(sent, external, local).ok is want
