"""The aiohttp application of one endpoint: vLLM's routes plus /sim admin routes.

Handlers only translate between HTTP and :class:`SimEndpoint`; errors are
:class:`ApiError` turned into vLLM-shaped JSON bodies.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from aiohttp import web

from servekit.errors import UsageError
from servekit.guard import guard_error_body, guard_rejects
from servekit.sim.endpoint import SimEndpoint
from servekit.sim.engine import EngineDeadError, Seq
from servekit.sim.metrics import SIM_VERSION, render
from servekit.sim.openai import ApiError, Kind, dumps, load_json, parse_generation, parse_tokenize
from servekit.sim.protocols.base import Admitted
from servekit.sim.shapes import ChunkWriter, channels, final_body

ENDPOINT = web.AppKey("endpoint", SimEndpoint)
JSON = "application/json"


def json_response(doc: Any, status: int = 200) -> web.Response:
    return web.Response(body=dumps(doc), status=status, content_type=JSON)


def error_response(exc: ApiError) -> web.Response:
    return web.Response(body=exc.body(), status=exc.status, content_type=JSON)


def build_app(ep: SimEndpoint) -> web.Application:
    """One endpoint's application (its own router, its own metrics registry)."""
    app = web.Application(client_max_size=1 << 30)
    app[ENDPOINT] = ep
    app.router.add_post("/v1/completions", partial(generate, kind="completion"))
    app.router.add_post("/v1/chat/completions", partial(generate, kind="chat"))
    app.router.add_post("/v1/responses", partial(generate, kind="responses"))
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/tokenize", tokenize)
    add_admin_routes(app.router, "/sim", lambda request: request.app[ENDPOINT])
    return app


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Action = Callable[[SimEndpoint, dict[str, Any]], object]


async def generate(request: web.Request, kind: Kind) -> web.StreamResponse:
    ep = request.app[ENDPOINT]
    if kind == "responses" and not ep.spec.responses_api:
        return web.Response(status=404, body=b'{"detail":"Not Found"}', content_type=JSON)
    body = await request.read()
    keyed = ep.spec.guard_mode == "prompt-keyed"
    if ep.spec.guard and guard_rejects(
        request.method, request.path, body, keyed, metaservers=ep.handoff.guard_keys(ep)
    ):
        ep.log.warning("decode guard: refused %s without kv_transfer_params", request.path)
        return web.Response(status=400, body=guard_error_body(request.path), content_type=JSON)
    try:
        await ep.unheard()
        req = parse_generation(kind, load_json(body))
        adm = await ep.admit(req, request.headers.get("X-Request-Id"))
    except ApiError as exc:
        await ep.unheard()
        return error_response(exc)
    if ep.empty_due():
        ep.engine.abort(adm.seq)
        headers = {"Content-Type": "text/event-stream" if req.stream else JSON}
        return web.Response(status=200, body=b"", headers=headers)
    if req.stream:
        return await _stream(request, ep, adm)
    reset = ep.reset_due()
    try:
        await ep.wait_done(adm.seq)
    except ApiError as exc:
        await ep.unheard()
        return error_response(exc)
    except asyncio.CancelledError:
        ep.engine.abort(adm.seq)
        raise
    if reset:
        _reset(request)
    await ep.unheard()
    parsers = channels(adm, ep.spec.reasoning_parser, ep.spec.tool_call_parser)
    body = final_body(adm, ep.spec.served_model_name, parsers)
    return web.Response(body=body, content_type=JSON)


async def _stream(request: web.Request, ep: SimEndpoint, adm: Admitted) -> web.StreamResponse:
    """SSE: one event per engine step; steps already waiting go out in one write.

    An endpoint whose node is lost (``unreachable``) goes silent: what it has not
    written yet is never written, and the connection stays open, as a peer that
    vanished leaves it.
    """
    seq = adm.seq
    queue = seq.chunks
    if queue is None:
        raise RuntimeError("a streamed sequence has no chunk queue")
    f = ep.faults
    writer = ChunkWriter(
        adm, ep.spec.served_model_name, mismatch=f.stream_mismatch, done=not f.stream_no_done,
        parsers=channels(adm, ep.spec.reasoning_parser, ep.spec.tool_call_parser),
    )  # fmt: skip
    reset_at = ep.faults.reset_after_tokens if ep.reset_due() else None
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    try:
        await resp.prepare(request)
        out = [writer.opening()]
        sent = 0
        while True:
            batch = [await queue.get()]
            while not queue.empty():
                batch.append(queue.get_nowait())
            for item in batch:
                if item is None:
                    out.append(_stream_end(writer, seq))
                    await ep.unheard()
                    await resp.write(b"".join(out))
                    return resp
                if reset_at is not None and sent + len(item) > reset_at:
                    await resp.write(b"".join(out))
                    _reset(request)
                    ep.engine.abort(seq)
                    return resp
                sent += len(item)
                finish = seq.finish_reason if sent >= len(seq.output) else None
                out.append(writer.step(item, finish))
                if finish is not None and ep.faults.die_after_finish:
                    await resp.write(b"".join(out))  # the finish went out; usage, [DONE] never
                    if request.transport is not None:  # a dying process's kernel closes it
                        request.transport.close()
                    ep.engine.abort(seq)
                    return resp
            if not ep.faults.merge_frames:  # a starved server writes it all at the end
                await ep.unheard()
                await resp.write(b"".join(out))
                out = []
    except (ConnectionError, asyncio.CancelledError):
        ep.engine.abort(seq)
        raise


def _stream_end(writer: ChunkWriter, seq: Seq) -> bytes:
    if seq.done.done() and seq.done.exception() is not None:
        exc = seq.done.exception()
        reason = str(exc) if isinstance(exc, EngineDeadError) else repr(exc)
        return writer.error(500, f"EngineCore died: {reason}", "EngineDeadError")
    return writer.closing()


def _reset(request: web.Request) -> None:
    """Drop the connection with a TCP reset, as a crashing server would."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def models(request: web.Request) -> web.Response:
    await request.app[ENDPOINT].unheard()
    spec = request.app[ENDPOINT].spec
    name = spec.served_model_name
    card = {
        "id": name,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "vllm",
        "root": name,
        "parent": None,
        "max_model_len": spec.max_model_len,
    }
    return json_response({"object": "list", "data": [card]})


async def health(request: web.Request) -> web.Response:
    ep = request.app[ENDPOINT]
    await ep.unheard()
    return web.Response(status=ep.health_status())


async def version(request: web.Request) -> web.Response:
    return json_response({"version": SIM_VERSION})


async def metrics(request: web.Request) -> web.Response:
    body = render(request.app[ENDPOINT].registry)
    return web.Response(body=body, content_type="text/plain", charset="utf-8")


async def tokenize(request: web.Request) -> web.Response:
    ep = request.app[ENDPOINT]
    try:
        ids = parse_tokenize(load_json(await request.read()))
    except ApiError as exc:
        return error_response(exc)
    return json_response(
        {
            "count": len(ids),
            "max_model_len": ep.spec.max_model_len,
            "tokens": ids,
            "token_strs": None,
        }
    )


ADMIN_FROM_ENV = "SERVEKIT_SIM_ADMIN_FROM"


def admin_refusal(request: web.Request) -> web.Response | None:
    """403 for a state-changing admin call from another machine, unless opened on purpose.

    A simulator started as a drop-in ``vllm`` binds where the rendered scripts
    say (often 0.0.0.0); its fault, kill and restart routes would then let
    anyone on the network stop an engine. They answer loopback peers only (the
    dry run's nodes are loopback addresses), unless ``SERVEKIT_SIM_ADMIN_FROM=any``
    was set when the simulator started. GET routes stay open (read-only).
    """
    if request.method == "GET" or os.environ.get(ADMIN_FROM_ENV) == "any":
        return None
    try:
        loopback = ipaddress.ip_address((request.remote or "").split("%", 1)[0]).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return None
    return error_response(
        ApiError(
            403,
            f"the simulator's admin routes answer loopback clients only; start it with "
            f"{ADMIN_FROM_ENV}=any to open them",
            "PermissionError",
        )
    )


def admin_handler(answer: Callable[[web.Request], Awaitable[Any]]) -> Handler:
    """An admin route: :func:`admin_refusal` first, then ``answer`` as JSON (errors: 4xx)."""

    async def handler(request: web.Request) -> web.Response:
        if (refused := admin_refusal(request)) is not None:
            return refused
        try:
            return json_response(await answer(request))
        except ApiError as exc:
            return error_response(exc)
        except UsageError as exc:
            return error_response(ApiError(400, str(exc)))

    return handler


def add_admin_routes(
    router: web.UrlDispatcher, prefix: str, pick: Callable[[web.Request], SimEndpoint]
) -> None:
    """POST {prefix}/faults|kill|restart, GET {prefix}/state.

    ``pick(request)`` finds the endpoint or raises ApiError (404 on the admin port).
    """

    def route(action: Action) -> Handler:
        """``action(endpoint, body)``, then the endpoint's state is the answer."""

        async def answer(request: web.Request) -> dict[str, Any]:
            ep = pick(request)
            raw = await request.read()
            action(ep, load_json(raw) if raw.strip() else {})
            return ep.state()

        return admin_handler(answer)

    router.add_post(f"{prefix}/faults", route(lambda ep, doc: ep.set_faults(doc)))
    router.add_post(
        f"{prefix}/kill", route(lambda ep, _doc: ep.kill("killed through the admin API"))
    )
    router.add_post(f"{prefix}/restart", route(lambda ep, doc: ep.restart(slow_start(doc))))
    router.add_get(f"{prefix}/state", route(lambda ep, _doc: None))


def slow_start(doc: dict[str, Any]) -> float | None:
    """A restart's ``slow_start_s``: None or a number >= 0 (else ApiError 400)."""
    slow = doc.get("slow_start_s")
    if slow is not None and (not isinstance(slow, int | float) or slow < 0):
        raise ApiError(400, "slow_start_s: expected a number >= 0")
    return None if slow is None else float(slow)
