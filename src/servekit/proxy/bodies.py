"""Bodies read whole, bounded in bytes and time: client requests and engine answers.

A client's body is read with a deadline (``--body-timeout``) and a cap
(``--max-body-bytes``): a ``Content-Length`` above the cap is a 413 before one
byte is read (``Content-Length: 999999999999`` used to wait for a body that
never came), a chunked body is cut at the cap, and a body that has not arrived
by the deadline is a 408 (a client trickling bytes held its connection and its
handler for ever). Both responses close the connection (RFC 9110 15.5.9 and
15.5.14): the rest of the body will not be read.

An engine's unstreamed answer is read up to ``--max-answer-bytes`` (a 100 MB
answer was buffered whole, 261 MB of RSS; six of 60 MB, 1.59 GB): beyond it
the answer is a 502 that is not held against the engine (the request asked
for it). A 200 whose body is not UTF-8 JSON (truncated, or another encoding)
is a failure of that engine, counted and retried like a 5xx: it is never
relayed as a 200. A big answer is parsed in a parse worker, and only what the
proxy reads of it comes back (:func:`parse_answer`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

from servekit.proxy import parsepool
from servekit.proxy.budget import charge, charged, parse_cost_yielding
from servekit.proxy.failures import ProxyError, error_response

T = TypeVar("T")


def _too_large(limit: int) -> ProxyError:
    return ProxyError(
        "payload_too_large", "proxy", f"request body exceeds --max-body-bytes ({limit} bytes)"
    )


def expect_handler(limit: int) -> Callable[[web.Request], Awaitable[web.StreamResponse | None]]:
    """``Expect: 100-continue``: an oversized declared body is refused before it is sent.

    Otherwise as aiohttp's own handler: ``100 Continue`` on HTTP/1.1, 417 for
    any other expectation.
    """

    async def expect(request: web.Request) -> web.StreamResponse | None:
        declared = request.content_length
        if declared is not None and declared > limit:
            return error_response(_too_large(limit))
        if request.version != aiohttp.HttpVersion11:
            return None
        if request.headers.get("Expect", "").lower() != "100-continue":
            raise web.HTTPExpectationFailed(text="expected 100-continue or nothing")
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the answer proper has not started
        return None

    return expect


async def read_capped(
    stream: aiohttp.StreamReader,
    declared: int | None,
    limit: int,
    too_large: Callable[[], Exception],
) -> bytes:
    """The whole stream; ``too_large()`` raised when it, or its declared length, passes
    ``limit`` (a factory: the error is built only for a body that is too large)."""
    if declared is not None and declared > limit:
        raise too_large()
    parts: list[bytes] = []
    size = 0
    while chunk := await stream.readany():
        size += len(chunk)
        if size > limit:
            raise too_large()
        charge(len(chunk))  # the request's share of --memory-budget
        parts.append(chunk)
    return b"".join(parts)


async def read_request(
    request: web.Request,
    limit: int,
    timeout_s: float,
    too_large: Callable[[], Exception] | None = None,
) -> bytes:
    """The whole request body, or a 413/408 :class:`ProxyError` (connection then closed).

    Every handler that reads a body reads it here, so none waits for one past
    ``--body-timeout`` (a running handler is never evicted at the connection cap).
    """
    too_large = too_large or partial(_too_large, limit)
    try:
        async with asyncio.timeout(timeout_s):
            return await read_capped(request.content, request.content_length, limit, too_large)
    except TimeoutError:
        msg = f"request body not received within --body-timeout ({timeout_s:g} s)"
        raise ProxyError("request_timeout", "proxy", msg) from None


async def read_answer(resp: aiohttp.ClientResponse, limit: int, who: str, stage: str) -> bytes:
    """An engine's whole answer, or ``answer_too_large`` (502, not the engine's fault)."""

    def too_large() -> ProxyError:
        msg = f"{who} answered more than --max-answer-bytes ({limit} bytes)"
        return ProxyError("answer_too_large", stage, msg)

    return await read_capped(resp.content, resp.content_length, limit, too_large)


async def parse_off_loop(
    fn: Callable[..., T], raw: bytes, *args: Any, inline_if_worker_dies: bool = False
) -> T:
    """``fn(raw, *args)``, its parse charged to ``--memory-budget`` while it runs: in a
    parse worker when ``raw`` is over ``--parse-inline-bytes``, else on the loop. A
    worker that died is a 503 ``worker_failed``, or, with ``inline_if_worker_dies``, the
    parse is done on the loop instead."""
    workers = parsepool.CURRENT.get()
    cost = await parse_cost_yielding(raw)
    with charged(cost - len(raw)):
        if workers is not None and workers.wanted(len(raw)):
            try:
                return await workers.call(fn, raw, *args, cost=cost)
            except ProxyError:  # worker_failed
                if not inline_if_worker_dies:
                    raise
        return fn(raw, *args)


async def parse_answer(
    body: bytes, who: str, stage: str, keys: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A 200's body must be UTF-8 JSON, otherwise the engine failed (a retryable 502); the
    members ``keys`` of its top-level object, decoded (:func:`parsepool.answer_fields`).

    The parse is charged to ``--memory-budget`` while it runs; a body above
    ``--parse-inline-bytes`` is parsed in a parse worker, so the loop serves
    meanwhile (:mod:`servekit.proxy.parsepool`).
    """
    got = await parse_off_loop(parsepool.answer_fields, body, keys)
    if got is None:
        msg = f"{who} answered 200 with a body that is not UTF-8 JSON (truncated or mis-encoded)"
        raise ProxyError("upstream_error", stage, msg)
    return got
