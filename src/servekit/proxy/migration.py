"""Request migration: a stream whose decoder fails mid-answer is carried on elsewhere.

The decode leg asks vLLM for token ids (``return_token_ids: true``, vLLM >= 0.10.2;
0.32 sends ``prompt_token_ids`` once, in the first chunk, and ``token_ids`` per
chunk, in the choice for completions; chat puts ``prompt_token_ids`` at the top).
:class:`Tape` reads the stream event by event as it is relayed: it collects
those ids, removes them from what the client gets (unless the client asked for
them), and notices a stream that breaks, ends without ``[DONE]`` or ends with an
error event. The proxy then sends ``prompt = prompt ids + generated ids`` (a
token-id prompt: nothing is re-tokenized) to ``/v1/completions`` through a new
prefill/decode pair, with ``max_tokens`` (and ``min_tokens``) reduced by what was
generated and the same sampling fields; the new leg's events are rewritten with
the first leg's ``id``, ``created``, ``model`` and ``object`` (chat: the text
goes back into ``delta.content``) and its usage counts the tokens from the
client's prompt. With greedy sampling the client sees the answer it would have
had without the failure.

Known limits: a stop string split across the cut is not seen by the new leg (it
only checks its own output); the first text delta after the cut is detokenized
with the prompt as context, which vLLM does for token-id prompts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# token id lists in an event's JSON; a quote inside a JSON string is escaped, so
# these cannot match text the model wrote
_IDS = re.compile(rb'"(prompt_token_ids|token_ids)":\[([0-9, ]*)\]')
_STRIP = re.compile(rb',"(?:prompt_token_ids|token_ids)":\[[0-9, ]*\]')
_SEP = re.compile(rb"\r?\n\r?\n")

ROUTES = ("/v1/completions", "/v1/chat/completions")
COMPLETIONS = "/v1/completions"

# fields carried to the continuation (/v1/completions): what changes the tokens
# sampled or when they stop; chat-only fields (messages, tools, response_format)
# shaped the prompt, which the token ids now are
CARRIED = (
    "model", "temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "stop", "stop_token_ids", "ignore_eos",
    "skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output",
    "logit_bias", "allowed_token_ids", "bad_words", "user", "priority", "stream_options",
)  # fmt: skip


def _split(data: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE events (each with its blank line) and the incomplete rest."""
    if b"\r" in data:
        ends = [m.end() for m in _SEP.finditer(data)]
    else:  # the usual case, several times faster than the regex
        ends, at = [], data.find(b"\n\n")
        while at >= 0:
            ends.append(at + 2)
            at = data.find(b"\n\n", at + 2)
    events, pos = [], 0
    for end in ends:
        events.append(data[pos:end])
        pos = end
    return events, data[pos:]


def dumps(doc: Any) -> bytes:
    """Compact JSON as vLLM (pydantic) and the simulator write it."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def wants_ids(body: dict[str, Any]) -> bool:
    return body.get("return_token_ids") is True


def token_limit(route: str, body: dict[str, Any]) -> int | None:
    """The client's output token limit (completions default to 16 in vLLM)."""
    if route == COMPLETIONS:
        value = body.get("max_tokens", 16)
    else:
        value = body.get("max_completion_tokens", body.get("max_tokens"))
    return value if isinstance(value, int) else None


@dataclass
class Tape:
    """What a relayed stream has carried so far, read one SSE event at a time."""

    route: str
    body: dict[str, Any]
    prompt_ids: list[int] | None = None
    generated: list[int] = field(default_factory=list)
    done: bool = False
    failed: bool = False
    head: dict[str, Any] | None = None  # id, object, created, model of the first leg
    template: dict[str, Any] | None = None  # the first leg's first content chunk
    offset: int = 0  # tokens the current leg's prompt holds beyond the client's
    leg: int = 0
    max_event_bytes: int = 64 * 1024 * 1024  # the proxy passes --max-answer-bytes
    oversized: bool = False  # one event outgrew max_event_bytes: the stream is given up
    _buf: bytes = b""

    @property
    def keep_ids(self) -> bool:
        return wants_ids(self.body)

    def feed(self, chunk: bytes) -> bytes:
        """The complete events in ``chunk`` (with what was buffered), as the client gets them."""
        data = self._buf + chunk if self._buf else chunk
        events, self._buf = _split(data)
        out: list[bytes] = []
        for event in events:
            if self.failed or self.done:
                break
            out.append(self._event(event))
        if len(self._buf) > self.max_event_bytes:
            # an event that never ends would otherwise be held whole: the stream
            # fails (the engine's fault) and cannot be carried on, its ids unread
            self._buf, self.failed, self.oversized = b"", True, True
        return b"".join(out)

    def _event(self, event: bytes) -> bytes:
        payload = event.strip()
        if not payload.startswith(b"data:"):
            return event
        payload = payload[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return event
        if payload.startswith(b'{"error"') or payload.startswith(b'{"object":"error"'):
            self.failed = True  # the engine failed mid-answer (vLLM: an error event)
            return b""
        ids = self._collect(payload)
        if self.leg == 0:
            if self.head is None or self.template is None:
                self._remember(payload)
            return event if self.keep_ids or not ids else _STRIP.sub(b"", event)
        return self._rewrap(payload)

    def _collect(self, payload: bytes) -> bool:
        found = False
        for m in _IDS.finditer(payload):
            found = True
            ids = [int(t) for t in m.group(2).split(b",") if t.strip()]
            if m.group(1) == b"token_ids":
                self.generated.extend(ids)
            elif self.prompt_ids is None:
                self.prompt_ids = ids
        return found

    def _remember(self, payload: bytes) -> None:
        try:
            doc = json.loads(payload)
        except ValueError:
            return
        if not isinstance(doc, dict):
            return
        if self.head is None:
            self.head = {k: doc.get(k) for k in ("id", "object", "created", "model")}
        choices = doc.get("choices")
        if self.template is None and choices and isinstance(choices[0], dict):
            self.template = choices[0]

    def continuation(self) -> dict[str, Any] | None:
        """The /v1/completions body that carries on, or None when it cannot."""
        if self.prompt_ids is None or self.head is None or self.oversized:
            return None
        body: dict[str, Any] = {k: self.body[k] for k in CARRIED if k in self.body}
        limit = token_limit(self.route, self.body)
        done = len(self.generated)
        if limit is not None:
            if limit - done < 1:
                return None
            body["max_tokens"] = limit - done
        min_tokens = self.body.get("min_tokens")
        if isinstance(min_tokens, int) and min_tokens > done:
            body["min_tokens"] = min_tokens - done
        body["prompt"] = [*self.prompt_ids, *self.generated]
        body["stream"] = True
        body["return_token_ids"] = True
        self.offset = done
        self.leg += 1
        self.failed = False
        self._buf = b""
        return body

    def _rewrap(self, payload: bytes) -> bytes:
        """A continuation event in the first leg's shape."""
        try:
            doc = json.loads(payload)
        except ValueError:
            return b""
        if not isinstance(doc, dict) or self.head is None:
            return b""
        choices = doc.get("choices") or []
        new: dict[str, Any] = {**doc, **self.head}
        if self.route != COMPLETIONS:
            new = {**self.head, "choices": [self._chat_choice(c) for c in choices]}
            if "usage" in doc:
                new["usage"] = doc["usage"]
        else:
            new["choices"] = [self._completion_choice(c) for c in choices]
        usage = new.get("usage")
        if isinstance(usage, dict):
            new["usage"] = self._usage(usage)
        return b"data: " + dumps(new) + b"\n\n"

    def _completion_choice(self, choice: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in choice.items() if k != "prompt_token_ids"}
        if not self.keep_ids:
            out.pop("token_ids", None)
        return out

    def _chat_choice(self, choice: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"index": choice.get("index", 0)}
        out["delta"] = {"content": choice.get("text", "")}
        for key in ("logprobs", "finish_reason", "stop_reason"):
            out[key] = choice.get(key)
        if self.keep_ids and "token_ids" in choice:
            out["token_ids"] = choice["token_ids"]
        return out

    def _usage(self, usage: dict[str, Any]) -> dict[str, Any]:
        """Count from the client's prompt: the carried tokens were generated, not prompted."""
        out = dict(usage)
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if isinstance(prompt, int) and isinstance(completion, int):
            out["prompt_tokens"] = prompt - self.offset
            out["completion_tokens"] = completion + self.offset
            details = usage.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, dict) else None
            if isinstance(details, dict) and isinstance(cached, int):
                # the new leg's cache held carried tokens too; count the client's prompt only
                out["prompt_tokens_details"] = {
                    **details,
                    "cached_tokens": min(cached, prompt - self.offset),
                }
        return out
