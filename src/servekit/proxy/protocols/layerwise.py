"""The layerwise PD flow (vllm-ascend's MooncakeLayerwiseConnector): decoder first.

Unlike the pull flow (prefill, then decode with the prefill's block ids), the
layerwise connector needs the decoder's blocks before the prefill runs, so the
KV can be pushed into them layer by layer while the prefill computes:

1. the client's request goes to a decoder with ``kv_transfer_params`` exactly
   ``{do_remote_decode: false, do_remote_prefill: true, metaserver: URL}``
   (:func:`decode_payload`), URL being this proxy's ``/v1/metaserver``;
2. the decoder's scheduler, once it allocated blocks, POSTs them there: its
   ``request_id`` (vLLM's id for the request, made from the ``X-Request-Id``
   the proxy sent), ``remote_block_ids``, ``remote_engine_id``,
   ``remote_host``, ``remote_port`` (:func:`call_problem` checks the shape);
3. the proxy sends the client's request to a prefill with one token and that
   body as ``kv_transfer_params``, with the same ``X-Request-Id``, so both
   engines name the request alike (the prefill signals "done" by that name);
4. the decoder's answer (streamed or whole) goes to the client.

Facts and their sources: ``tests/proxy/fixtures/layerwise_protocol.json``.
Where this differs from the vendored example proxy, on purpose: the wait for
step 2 is bounded (``--metaserver-timeout``: 504, and the decode request is
closed, so the engine aborts it); a failed prefill closes the decode request
and answers a clean error (the example logs and leaves the client hanging);
``/v1/metaserver`` answers as soon as the call is matched, not after the
prefill (the decoder does not read the answer, and this frees its caller
thread); each attempt gets a fresh random request id, which is the only
capability a metaserver call carries: it is single use and never known to a
client before the call is consumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Coroutine
from functools import partial
from typing import Any, TypeGuard

from aiohttp import web

from servekit.guard import metaserver_url
from servekit.proxy.bodies import parse_off_loop, read_request
from servekit.proxy.config import ProxyConfig
from servekit.proxy.failures import Answer, OtherStageFailed, ProxyError, error_response
from servekit.proxy.instances import Instance
from servekit.proxy.parsepool import Raw, encode_body
from servekit.proxy.payloads import prefill_payload
from servekit.proxy.protocols.base import Handler
from servekit.proxy.requests import Ticket
from servekit.proxy.router import Router
from servekit.proxy.stages import Opened, Stages

PATH = "/v1/metaserver"
CALL_MAX_BYTES = 4 * 1024 * 1024  # 16k-token prompts are ~1k block ids: room to spare

# vLLM's id for a request whose X-Request-Id is {rid} (what the connector sends back).
REQUEST_IDS = {
    "/v1/completions": "cmpl-{rid}-0",
    "/v1/chat/completions": "chatcmpl-{rid}",
}


def decode_payload(body: dict[str, Any], metaserver: str) -> dict[str, Any]:
    """The client's request as the decoder gets it: the layerwise params, nothing else."""
    params = {"do_remote_decode": False, "do_remote_prefill": True, "metaserver": metaserver}
    return {**body, "kv_transfer_params": params}


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def call_problem(doc: object) -> str | None:
    """What is wrong with a metaserver call's body (None: the shape the connector sends)."""
    if not isinstance(doc, dict):
        return "body is not a JSON object"
    if doc.get("do_remote_decode") is not True:
        return "do_remote_decode is not true"
    ids = doc.get("remote_block_ids")
    if not isinstance(ids, list) or not all(_whole(b) and b >= 0 for b in ids):
        return "remote_block_ids is not a list of block ids"
    for key in ("remote_engine_id", "remote_host"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            return f"{key} is missing or not text"
    port = doc.get("remote_port")
    if not _whole(port) or not 0 < port <= 65535:
        return "remote_port is not a port number"
    return None


def default_metaserver(host: str, port: int) -> str:
    """``http://HOST:PORT/v1/metaserver`` (IPv6 literals bracketed)."""
    return metaserver_url(host, port, PATH)


class Book:
    """Requests waiting for their decoder's metaserver call, by vLLM's request id.

    ``body_timeout_s`` bounds the read of a call's body like every other body's.
    """

    def __init__(self, body_timeout_s: float = 60.0) -> None:
        self.body_timeout_s = body_timeout_s
        self._waiting: dict[str, asyncio.Future[Raw]] = {}
        self.background: set[asyncio.Task[Any]] = set()

    def expect(self, key: str) -> asyncio.Future[Raw]:
        future: asyncio.Future[Raw] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        return future

    def take(self, key: str) -> asyncio.Future[Raw] | None:
        """The waiting request of that id, removed (a call is honoured once)."""
        future = self._waiting.pop(key, None)
        return None if future is None or future.done() else future

    def forget(self, key: str) -> None:
        self._waiting.pop(key, None)

    def __len__(self) -> int:
        return len(self._waiting)

    def keep(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` to its end beside the request (a prefill the decode no longer needs)."""
        task = asyncio.get_running_loop().create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)


BOOK = web.AppKey("layerwise_book", Book)


def _refusal(status: int, code: str, message: str) -> web.Response:
    return web.json_response(ProxyError(code, "decode", message).payload(), status=status)


async def metaserver(request: web.Request) -> web.Response:
    """POST /v1/metaserver: a decoder hands over its block allocation for one request."""
    book = request.app[BOOK]

    def too_large() -> ProxyError:
        msg = f"metaserver call exceeds {CALL_MAX_BYTES} bytes"
        return ProxyError("payload_too_large", "decode", msg)

    try:
        raw = await read_request(request, CALL_MAX_BYTES, book.body_timeout_s, too_large)
    except ProxyError as err:
        return error_response(err)  # 413 or 408, and the connection closed
    key, problem, call = await _read_call(raw)
    future = book.take(key) if key is not None else None
    if future is None:
        return _refusal(404, "unknown_request", "request_id names no request waiting for its KV")
    if call is None:
        msg = f"the decoder's metaserver call is malformed: {problem}"
        future.set_exception(ProxyError("upstream_error", "decode", msg))
        return _refusal(400, "bad_request", msg)
    future.set_result(call)
    return web.json_response({"status": "accepted"})


def read_call(raw: bytes) -> tuple[str | None, str | None, Raw | None]:
    """A metaserver call's ``request_id``, what is wrong with it, and (when nothing is) the
    call as the JSON text its prefill payload carries. On the loop, or in a parse worker."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        doc = None
    key = doc.get("request_id") if isinstance(doc, dict) else None
    problem = call_problem(doc)
    call = None if problem is not None else Raw(json.dumps(doc).encode())
    return (key if isinstance(key, str) else None), problem, call


async def _read_call(raw: bytes) -> tuple[str | None, str | None, Raw | None]:
    """:func:`read_call`, its parse charged to the budget; a big call (up to
    :data:`CALL_MAX_BYTES`) in a parse worker, or, when that worker died, on the loop:
    the request waiting for the call is failed or served now, not at its timeout."""
    return await parse_off_loop(read_call, raw, inline_if_worker_dies=True)


def add_routes(app: web.Application, body_timeout_s: float) -> None:
    """The metaserver route and the book it fills (layerwise mode only)."""
    app[BOOK] = Book(body_timeout_s)
    app.router.add_post(PATH, metaserver)


def _advertised(router: Router, request: web.Request) -> str:
    cfg = router.config
    if cfg.metaserver_url is not None:
        return cfg.metaserver_url
    port = cfg.port
    if port == 0:  # bound to any free port: the one this request came in on
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        port = int(sockname[1]) if sockname else 0
    return default_metaserver(cfg.host, port)


class Layerwise(Handler):
    """Decoder first: each decode attempt waits for its decoder's call, then prefills."""

    protocol = "layerwise"
    migrates = False

    def check(self, ticket: Ticket) -> None:
        route = ticket.route
        if route not in REQUEST_IDS:
            msg = (
                f"{route}: layerwise mode serves {' and '.join(REQUEST_IDS)} (vLLM names other "
                "requests itself, so the decoder's metaserver call could not be matched)"
            )
            raise ProxyError("bad_request", "proxy", msg)
        if ticket.prompts > 1:
            msg = (
                "prompt: layerwise mode serves one prompt per request; send the prompts separately"
            )
            raise ProxyError("bad_request", "proxy", msg)

    async def decode_first(self, stages: Stages, request: web.Request) -> Opened | bytes:
        """The layerwise flow, retried on another decoder on 5xx."""
        book = request.app[BOOK]
        exchange = partial(_attempt, stages, book, url=_advertised(stages.router, request))
        stages.progress.stage = "decode"
        return await stages.router.attempt("decode", stages.ticket.prefix_key, exchange)

    def add_routes(self, app: web.Application, config: ProxyConfig) -> None:
        add_routes(app, config.body_timeout_s)


async def _stop(task: asyncio.Task[Any] | None) -> None:
    """Cancel a task and wait for its cleanup (closing a connection aborts the engine's request)."""
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


async def _attempt(stages: Stages, book: Book, inst: Instance, url: str) -> Opened | bytes:
    """Decode on ``inst``, wait for its metaserver call, prefill into its blocks."""
    cfg = stages.router.config
    rid = uuid.uuid4().hex
    stages.name_request(rid)  # the decode and its prefill must share it
    key = REQUEST_IDS[stages.ticket.route].format(rid=rid)
    call = book.expect(key)
    data = encode_body(decode_payload(stages.ticket.body, url))
    decode = asyncio.create_task(stages.decode("decode", inst, data))
    prefill: asyncio.Task[dict[str, Any]] | None = None
    handed_off = False
    try:
        first: set[asyncio.Future[Any]] = {decode, call}
        done, _ = await asyncio.wait(
            first, timeout=cfg.metaserver_timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if call not in done:
            who = f"decode {stages.router.describe(inst)}"
            if decode in done:
                decode.result()  # its own failure (a 4xx, a 5xx, a connection error)
                msg = (
                    f"{who} answered without calling {PATH}: is its kv connector "
                    "MooncakeLayerwiseConnector?"
                )
                raise ProxyError("missing_kv_transfer_params", "decode", msg)
            msg = (
                f"{who} did not call {url} within {cfg.metaserver_timeout_s:g} s "
                "(--metaserver-timeout); can it reach that address?"
            )
            raise ProxyError("timeout", "decode", msg)
        payload = prefill_payload(stages.ticket.route, stages.ticket.body, with_kv_params=False)
        payload["kv_transfer_params"] = call.result()  # the decoder's call, whole
        prefill = asyncio.create_task(stages.prefill_on_any(encode_body(payload)))
        both: set[asyncio.Future[Any]] = {decode, prefill}
        done, _ = await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
        if prefill in done and prefill.exception() is not None:
            error = prefill.exception()
            if isinstance(error, ProxyError | Answer):
                raise OtherStageFailed(error)
            raise OtherStageFailed(
                ProxyError("upstream_error", "prefill", f"prefill failed: {error}")
            )
        out = await decode
        if not prefill.done():  # the decode has its KV: let the prefill's answer arrive
            book.keep(_drain(prefill))
            handed_off = True
        return out
    finally:
        book.forget(key)
        if not handed_off:
            await _stop(prefill)
        await _stop(decode)


async def _drain(task: asyncio.Task[Any]) -> None:
    with contextlib.suppress(Exception):
        await task
