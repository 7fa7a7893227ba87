"""A decoder's SSE stream read event by event, in time linear in its bytes.

The tape of a stream that may migrate (:mod:`servekit.proxy.tape`) reads every
event the relay passes on. Two costs used to grow faster than the bytes: the
buffer of an event still arriving was joined with each new chunk and searched
again from its start (quadratic in the event's size), and the event's text was
found by a regular expression that took about 2 s over one 8 MB event, on the
event loop. Now :class:`Splitter` searches each byte once (the last three
bytes of what is held, for a separator that straddles two chunks, and the new
chunk) and joins an event's chunks once; :func:`read_event` is a plain JSON
parse (C speed), and an event larger than ``--parse-inline-bytes`` is read in a
parse worker (:mod:`servekit.proxy.parsepool`), so the loop only splits it.

vLLM's events carry the token ids the proxy asked for (``return_token_ids``):
``prompt_token_ids`` once, at the top of a chat event or in a completion
choice, and ``token_ids`` in each choice. The prompt's ids are kept as the
JSON text the engine wrote (a continuation splices that text into its body;
a million ids are never turned into a million ints and back), the
generated ones as ints.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from servekit.proxy import jsoncodec

SEPARATOR = re.compile(rb"\r?\n\r?\n")
_ID_LISTS = re.compile(rb',"(?:prompt_token_ids|token_ids)":\[[0-9, ]*\]')
OVERLAP = 3  # a separator is 4 bytes at most: 3 may sit in what is held
_PROMPT_IDS = re.compile(rb'"prompt_token_ids":\s*\[([0-9,\s]*)\]')


class Splitter:
    """Complete SSE events (each with its blank line) out of the chunks of a stream."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.held = 0  # bytes of the event still arriving
        self.scanned = 0  # bytes searched for a separator, over the stream's life

    def feed(self, chunk: bytes) -> list[bytes]:
        """The events ``chunk`` completes; the rest is held for the next chunk."""
        if not chunk:
            return []
        tail = self._tail() if self.held else b""
        window = tail + chunk
        self.scanned += len(window)
        ends = _separator_ends(window)
        events: list[bytes] = []
        start = 0  # in ``chunk``
        for end in ends:
            cut = end - len(tail)  # where the event ends in ``chunk``
            if cut <= start:
                continue  # cannot happen: what is held has no separator
            if self._parts:
                events.append(b"".join((*self._parts, chunk[start:cut])))
                self._parts, self.held = [], 0
            else:
                events.append(chunk[start:cut])
            start = cut
        if start < len(chunk):
            rest = chunk[start:]
            self._parts.append(rest)
            self.held += len(rest)
        return events

    def drop(self) -> None:
        """Forget what is held (a stream given up)."""
        self._parts, self.held = [], 0

    def _tail(self) -> bytes:
        tail = b""
        for part in reversed(self._parts):
            tail = part[-(OVERLAP - len(tail)) :] + tail
            if len(tail) >= OVERLAP:
                break
        return tail


def _separator_ends(data: bytes) -> list[int]:
    if b"\r" in data:
        return [m.end() for m in SEPARATOR.finditer(data)]
    ends, at = [], data.find(b"\n\n")
    while at >= 0:
        ends.append(at + 2)
        at = data.find(b"\n\n", at + 2)
    return ends


class Event(NamedTuple):
    """One SSE event, read: what migration needs of it."""

    kind: str  # "data", "done" ([DONE]), "error" (an error object), "other"
    doc: dict[str, Any] | None  # the data's JSON, less any prompt_token_ids
    prompt: bytes | None  # the prompt's token ids as the JSON text between the brackets
    ids: list[int] | None  # the first choice's token_ids (None: it carries none)
    stripped: bytes | None = None  # the event without its id lists (when asked and present)


def payload_of(event: bytes) -> bytes | None:
    """The data of an SSE event (None: a comment or another field)."""
    payload = event.strip()
    if not payload.startswith(b"data:"):
        return None
    return payload[5:].strip()


def read_event(event: bytes, strip: bool = False) -> Event:
    """Read one event (pure: run on the loop, or in a parse worker for a big one);
    ``strip``: also the event's bytes without its token id lists."""
    payload = payload_of(event)
    if payload is None:
        return Event("other", None, None, None)
    if payload == b"[DONE]":
        return Event("done", None, None, None)
    try:
        doc = jsoncodec.loads(payload)
    except (ValueError, RecursionError):
        return Event("other", None, None, None)
    if not isinstance(doc, dict):
        return Event("other", None, None, None)
    if "error" in doc or doc.get("object") == "error":
        return Event("error", doc, None, None)
    prompt: bytes | None = None
    if doc.pop("prompt_token_ids", None) is not None:
        prompt = _prompt_text(payload)
    ids: list[int] | None = None
    choices = doc.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        first = choices[0]
        if first.pop("prompt_token_ids", None) is not None and prompt is None:
            prompt = _prompt_text(payload)
        got = first.get("token_ids")
        if isinstance(got, list) and all(type(t) is int for t in got):
            ids = got
    stripped = (
        _ID_LISTS.sub(b"", event) if strip and (ids is not None or prompt is not None) else None
    )
    return Event("data", doc, prompt, ids, stripped)


def _prompt_text(payload: bytes) -> bytes | None:
    match = _PROMPT_IDS.search(payload)
    return match.group(1) if match is not None else None
