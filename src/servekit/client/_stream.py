"""Turn response bytes into a :class:`RequestRecord`'s content fields.

One accumulator per request: it is fed the raw chunks with their arrival stamps
and reads OpenAI completion and chat payloads (streamed or whole). The timing
rule matches ``vllm bench serve``: every frame with a non-empty ``choices`` list
is a token frame; usage-only frames and ``[DONE]`` are not.
"""

from __future__ import annotations

import json
from typing import Any

from servekit.client._records import ErrorKind, Frame, RequestKind, Usage
from servekit.client._sse import SSEDecoder


class ResponseAccumulator:
    """Collects one response's bytes, frames, text, finish_reason and usage."""

    def __init__(self, kind: RequestKind, sse: bool, keep_frames: bool, keep_body: bool) -> None:
        self.kind = kind
        self.sse = sse
        self.keep_frames = keep_frames
        self.keep_body = keep_body
        self.first_byte_ns: int | None = None
        self.token_times: list[int] = []
        self.frames: list[tuple[int, str]] = []
        self.text_parts: list[str] = []
        self.body = bytearray()
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.done = False
        self.error: str | None = None
        self.error_kind: ErrorKind | None = None
        self._decoder = SSEDecoder() if sse else None

    def feed(self, chunk: bytes, t_ns: int) -> None:
        """Record bytes that arrived at ``t_ns``."""
        if self.first_byte_ns is None:
            self.first_byte_ns = t_ns
        if self.keep_body or self._decoder is None:
            self.body += chunk
        if self._decoder is not None:
            for t, data in self._decoder.feed(chunk, t_ns):
                self._on_frame(t, data)

    def finish(self, t_ns: int) -> None:
        """End of body: flush a trailing frame and parse a whole JSON body."""
        if self._decoder is not None:
            for t, data in self._decoder.flush(t_ns):
                self._on_frame(t, data)
        elif self.kind != "raw":
            self._read_whole(bytes(self.body))

    def fail(self, kind: ErrorKind, message: str) -> None:
        """Mark the request failed (the first failure wins)."""
        if self.error is None:
            self.error, self.error_kind = message, kind

    def frame_models(self) -> tuple[Frame, ...]:
        """Kept frames as records."""
        return tuple(Frame(t_ns=t, data=d) for t, d in self.frames)

    def body_text(self) -> str | None:
        """The body as text when kept (always for non-stream responses)."""
        if not self.keep_body and self._decoder is not None:
            return None
        return self.body.decode("utf-8", errors="replace")

    def _on_frame(self, t_ns: int, data: str) -> None:
        if self.keep_frames:
            self.frames.append((t_ns, data))
        if data == "[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(data)
        except ValueError:
            self.fail("protocol", f"stream frame is not JSON: {data[:80]!r}")
            return
        if not isinstance(obj, dict):
            self.fail("protocol", f"stream frame is not a JSON object: {data[:80]!r}")
            return
        if "error" in obj:
            self.fail("stream", f"error frame: {json.dumps(obj['error'])[:200]}")
            return
        choices = obj.get("choices")
        if choices:
            self.token_times.append(t_ns)
            self._read_choice(choices[0], streamed=True)
        if obj.get("usage"):
            self.usage = Usage.from_json(obj["usage"])

    def _read_whole(self, body: bytes) -> None:
        try:
            obj = json.loads(body)
        except ValueError:
            self.fail("protocol", f"response body is not JSON: {body[:80]!r}")
            return
        if not isinstance(obj, dict):
            return
        choices = obj.get("choices")
        if choices:
            self._read_choice(choices[0], streamed=False)
        if obj.get("usage"):
            self.usage = Usage.from_json(obj["usage"])

    def _read_choice(self, choice: dict[str, Any], streamed: bool) -> None:
        if self.kind == "chat":
            part = choice.get("delta" if streamed else "message") or {}
            text = part.get("content") if isinstance(part, dict) else None
        else:
            text = choice.get("text")
        if text:
            self.text_parts.append(text)
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
