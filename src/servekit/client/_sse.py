"""An incremental server-sent-events decoder that keeps arrival times.

Bytes are fed as they come off the connection together with the
``perf_counter_ns`` stamp of their arrival; each complete event is returned
with the stamp of the chunk that completed it. Only ``data:`` lines matter for
OpenAI-style streams; comments (``:`` pings) and other fields are dropped.
"""

from __future__ import annotations

import codecs


class SSEDecoder:
    """Split a byte stream into event payloads, stamping each with its arrival."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""

    def feed(self, chunk: bytes, t_ns: int) -> list[tuple[int, str]]:
        """Add bytes that arrived at ``t_ns``; return the events they completed."""
        self._buffer += self._decoder.decode(chunk)
        if "\n\n" not in self._buffer and "\r\n\r\n" not in self._buffer:
            return []
        text = self._buffer.replace("\r\n", "\n")
        *events, self._buffer = text.split("\n\n")
        out: list[tuple[int, str]] = []
        for event in events:
            data = _event_data(event)
            if data is not None:
                out.append((t_ns, data))
        return out

    def flush(self, t_ns: int) -> list[tuple[int, str]]:
        """Return a final event the server did not terminate with a blank line."""
        rest = (self._buffer + self._decoder.decode(b"", final=True)).strip()
        self._buffer = ""
        data = _event_data(rest) if rest else None
        return [(t_ns, data)] if data is not None else []


def _event_data(event: str) -> str | None:
    """Join the ``data:`` lines of one event (SSE spec); None when it has none."""
    lines = [line[5:].removeprefix(" ") for line in event.split("\n") if line.startswith("data:")]
    return "\n".join(lines) if lines else None
