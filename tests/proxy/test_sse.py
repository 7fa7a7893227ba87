"""A decoder's SSE stream read in linear time, its big events off the event loop (issue 45).

One 8 MB event took about 2 s of the loop in the Tape: its buffer was joined and
searched again with each chunk, and its text found by a backtracking expression.
The splitter now reads each byte once, and an event over --parse-inline-bytes is
read by a parse worker. Timing is measured in benchmarks/migration_events.py;
these tests pin what makes it linear and where the big event is read.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import given, settings, strategies as st

from servekit.proxy import parsepool
from servekit.proxy.sse import OVERLAP, Splitter, read_event

from .harness import run, stack


def test_an_event_arriving_in_many_chunks_is_searched_once() -> None:
    event = b"data: " + b"x" * (8 << 20) + b"\n\n"
    size = 64 << 10
    splitter = Splitter()
    got: list[bytes] = []
    chunks = 0
    for at in range(0, len(event), size):
        got += splitter.feed(event[at : at + size])
        chunks += 1
    assert got == [event] and splitter.held == 0
    assert splitter.scanned <= len(event) + OVERLAP * chunks


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from([b"data: a", b"\n", b"\r\n", b"\r", b"x", b"data: [DONE]"]), max_size=30
    ),
    st.lists(st.integers(1, 8), max_size=10),
)
def test_events_are_the_same_however_the_stream_is_cut(parts: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(parts)
    whole = Splitter().feed(stream)
    splitter, got, at = Splitter(), [], 0
    for n in cuts:
        got += splitter.feed(stream[at : at + n])
        at += n
    got += splitter.feed(stream[at:])
    assert got == whole
    assert b"".join(got) + b"".join(splitter._parts) == stream


def test_reading_an_event_takes_the_prompt_ids_as_text_and_strips_them_when_asked() -> None:
    doc = {"id": "c", "choices": [{"index": 0, "text": '"token_ids":[1]', "token_ids": [7],
           "prompt_token_ids": [1, 2, 3]}]}  # fmt: skip
    raw = b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"
    ev = read_event(raw, strip=True)
    assert (ev.kind, ev.prompt, ev.ids) == ("data", b"1,2,3", [7])
    assert ev.stripped is not None and b"prompt_token_ids" not in ev.stripped
    assert json.loads(ev.stripped[6:])["choices"][0]["text"] == doc["choices"][0]["text"]
    assert read_event(b"data: [DONE]\n\n").kind == "done"
    assert read_event(b'data: {"error": {"code": 500}}\n\n').kind == "error"
    assert read_event(b"data: {nope\n\n").kind == read_event(b": comment\n\n").kind == "other"


def test_a_big_event_is_read_in_a_parse_worker_and_the_answer_is_the_same(
    monkeypatch: Any,
) -> None:
    """A chat prompt's ids make the first event about twice the request's size: with
    --parse-inline-bytes between the two, the request is parsed on the loop and the
    event in the worker."""
    calls: list[str] = []
    real = parsepool.Workers.call

    async def spy(self: parsepool.Workers, fn: Any, *args: Any, cost: int = 0) -> Any:
        calls.append(fn.__name__)
        return await real(self, fn, *args, cost=cost)

    monkeypatch.setattr(parsepool.Workers, "call", spy)
    words = " ".join(f"w{i}" for i in range(3000))
    body = {"model": "sim-model", "messages": [{"role": "user", "content": words}],
            "max_tokens": 8, "temperature": 0, "stream": True}  # fmt: skip

    async def answer(workers: int) -> bytes:
        config = {"migration_limit": 3, "parse_workers": workers, "parse_inline_bytes": 24_000}
        async with stack(prefill=1, decode=1, **config) as s:
            status, raw = await s.post("/v1/chat/completions", body, headers={"X-Request-Id": "b"})
            assert status == 200
            return re.sub(rb'"created":\d+', b"", raw)

    with_worker = run(answer(1))
    assert calls == ["read_event"]
    assert run(answer(0)) == with_worker and calls == ["read_event"]
