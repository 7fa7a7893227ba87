"""A relayed stream's head goes out with its first bytes and its [DONE] with its end.

aiohttp's StreamResponse sends the head, each chunk and the chunked end as writes of
their own (a send each); the relay's response holds the head until the first bytes
(which it already has when it starts the answer) and the bytes that carry [DONE]
until the end. Seen at the proxy's own socket: every write aiohttp makes on a
connection whose local port is the proxy's.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import http_writer

from servekit.proxy import relay

from .harness import stack

BODY = {"model": "sim-model", "prompt": "hello", "max_tokens": 6, "stream": True,
        "ignore_eos": True}  # fmt: skip


def _proxy_writes(monkeypatch: pytest.MonkeyPatch, port: list[int]) -> list[bytes]:
    """Every write aiohttp makes on the proxy's client connections, as sent."""
    seen: list[bytes] = []
    write, writelines = http_writer.StreamWriter._write, http_writer.StreamWriter._writelines

    def mine(w: Any) -> bool:
        transport = w.transport
        name = transport.get_extra_info("sockname") if transport is not None else None
        return bool(name) and name[1] in port

    def _write(self: Any, chunk: Any) -> None:
        if mine(self):
            seen.append(bytes(chunk))
        write(self, chunk)

    def _writelines(self: Any, chunks: Any) -> None:
        chunks = list(chunks)
        if mine(self):
            seen.append(b"".join(bytes(c) for c in chunks))
        writelines(self, chunks)

    monkeypatch.setattr(http_writer.StreamWriter, "_write", _write)
    monkeypatch.setattr(http_writer.StreamWriter, "_writelines", _writelines)
    return seen


@pytest.mark.parametrize("buffered", [True, False])
def test_the_head_rides_with_the_first_bytes_and_done_with_the_end(
    monkeypatch: pytest.MonkeyPatch, buffered: bool
) -> None:
    """The control (``buffered`` False, aiohttp's default) sends the head alone."""
    monkeypatch.setattr(relay._Stream, "_send_headers_immediately", not buffered)
    port: list[int] = []
    seen = _proxy_writes(monkeypatch, port)

    async def scenario() -> None:
        async with stack(1, 1) as s:
            port.append(int(s.url.rsplit(":", 1)[1]))
            status, raw = await s.post("/v1/completions", BODY)
            assert status == 200 and raw.rstrip().endswith(b"data: [DONE]")

    asyncio.run(scenario())
    assert seen and seen[0].startswith(b"HTTP/1.1 200")
    assert (b"data: " in seen[0]) is buffered, seen[0][-120:]
    assert seen[-1].endswith(b"0\r\n\r\n") and b"[DONE]" in seen[-1], seen[-1][-120:]
