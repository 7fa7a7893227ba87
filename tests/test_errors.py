"""A UsageError is one line whatever it quotes."""

from __future__ import annotations

from hypothesis import given, strategies as st

from servekit.errors import UsageError


@given(st.text(max_size=40))
def test_a_usage_error_quoting_any_text_is_one_printable_line(quoted: str) -> None:
    message = UsageError(f"{quoted}: unknown field; give role only").message
    assert message.isprintable() and message.endswith("give role only")


def test_a_printable_message_is_kept_as_written() -> None:
    assert UsageError("urls: give a list — of http://HOST:PORT").message == (
        "urls: give a list — of http://HOST:PORT"
    )
