"""Typed records of what went over the wire, one per request.

Errors are data: a refused connection, an HTTP 500 or a stream that never sent
a token all come back as a :class:`RequestRecord` with ``error`` set, so a
benchmark counts failures instead of losing them and acceptance keeps the raw
bodies as evidence either way. Times are ``time.perf_counter_ns()`` stamps taken
when bytes left or reached the socket layer, never wall-clock.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any, Literal

from pydantic import Field

from servekit.vocabulary import StrictModel

ErrorKind = Literal["connect", "timeout", "http", "protocol", "stream", "no_token"]
RequestKind = Literal["completion", "chat", "raw"]


class Frame(StrictModel):
    """One server-sent event: its ``data`` payload and when it was complete."""

    t_ns: int = Field(description="perf_counter_ns when the frame's last byte arrived")
    data: str = Field(description="the event's data payload, '[DONE]' included")


class Usage(StrictModel):
    """Token counts the server reported (``usage`` in the body or final frame)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    cached_tokens: int | None = Field(default=None, description="prompt_tokens_details")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Usage:
        """Read an OpenAI ``usage`` object, tolerating missing fields."""
        details = data.get("prompt_tokens_details") or {}
        return cls(
            prompt_tokens=data.get("prompt_tokens"),
            completion_tokens=data.get("completion_tokens"),
            total_tokens=data.get("total_tokens"),
            cached_tokens=details.get("cached_tokens") if isinstance(details, dict) else None,
        )


class RequestRecord(StrictModel):
    """Everything about one HTTP exchange: bodies, timings, outcome.

    ``token_times_ns`` holds the arrival time of every stream frame that carried
    a ``choices`` entry (vLLM's "chunk"), which is what TTFT and ITL are made of,
    with the same rule as ``vllm bench serve``.
    """

    kind: RequestKind
    method: str
    url: str
    request_body: str | None = Field(description="the exact bytes sent, as UTF-8 text")
    stream: bool = False
    status: int | None = None
    headers: dict[str, str] = Field(default_factory=dict, description="response headers")
    t_start_ns: int
    t_headers_ns: int | None = None
    t_first_byte_ns: int | None = None
    t_end_ns: int
    token_times_ns: tuple[int, ...] = ()
    frames: tuple[Frame, ...] = Field(default=(), description="SSE frames when kept")
    response_body: str | None = Field(
        default=None, description="whole body (non-stream) or the raw SSE text when kept"
    )
    text: str = Field(default="", description="generated text (completion text or chat content)")
    finish_reason: str | None = None
    usage: Usage | None = None
    done: bool = Field(default=False, description="the stream ended with [DONE]")
    error: str | None = None
    error_kind: ErrorKind | None = None

    @property
    def ok(self) -> bool:
        """True when the exchange succeeded (2xx, no stream error, a token if streamed)."""
        return self.error is None

    @property
    def request_sha256(self) -> str:
        """sha256 of the request body as sent (evidence identity)."""
        return hashlib.sha256((self.request_body or "").encode("utf-8")).hexdigest()

    @property
    def ttft_ns(self) -> int | None:
        """Time to first token frame (streams) or to the whole body (non-stream)."""
        if self.token_times_ns:
            return self.token_times_ns[0] - self.t_start_ns
        return None

    @property
    def itl_ns(self) -> list[int]:
        """Gaps between consecutive token frames (vLLM's ITL)."""
        t = self.token_times_ns
        return [b - a for a, b in itertools.pairwise(t)]

    @property
    def latency_ns(self) -> int:
        """End-to-end latency: start to last token frame (streams, as vLLM) or to end."""
        if self.token_times_ns:
            return self.token_times_ns[-1] - self.t_start_ns
        return self.t_end_ns - self.t_start_ns

    @property
    def output_tokens(self) -> int:
        """Completion tokens from usage; else the count of token frames."""
        if self.usage is not None and self.usage.completion_tokens is not None:
            return self.usage.completion_tokens
        return len(self.token_times_ns)

    def json_body(self) -> Any:
        """The response body parsed as JSON (non-stream), or None if it is not JSON."""
        if self.response_body is None:
            return None
        try:
            return json.loads(self.response_body)
        except ValueError:
            return None
