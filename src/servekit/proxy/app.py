"""The proxy's HTTP surface: generation routes, /health and /metrics.

The generation handler reads and checks the request, runs its flow
(:mod:`servekit.proxy.flow`) and counts the outcome; admin routes live in :mod:`servekit.proxy.admin`, relayed
engine endpoints (models, tokenizer, prefix cache) in
:mod:`servekit.proxy.passthrough`, the engines' metrics in :mod:`servekit.proxy.engine_metrics`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from servekit.proxy import admin, engine_metrics, jsoncodec, parsepool, passthrough
from servekit.proxy.bodies import expect_handler, read_request
from servekit.proxy.budget import Budget, charge, holding, parse_cost_yielding, refund
from servekit.proxy.conns import Connections, track
from servekit.proxy.failures import Answer, ProxyError, error_response
from servekit.proxy.flow import serve
from servekit.proxy.parsepool import Workers
from servekit.proxy.protocols import handler_for, layerwise
from servekit.proxy.ratelog import RateLimited, printable
from servekit.proxy.requests import Ticket, make_ticket
from servekit.proxy.router import Router
from servekit.proxy.stages import Progress
from servekit.proxy.validation import check_request
from servekit.proxy.workers import every_workers_metrics

ROUTER = web.AppKey("router", Router)
CONNS = web.AppKey("connections", Connections)
BAD_REQUESTS = web.AppKey("bad_requests", RateLimited)
WORKERS = web.AppKey("parse_workers", Workers)
GENERATION_ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/responses")
# layerwise.PATH: decoders call it without a key; the request id it names is the capability.
OPEN_PATHS = frozenset({"/health", "/healthcheck", "/metrics", engine_metrics.PATH, layerwise.PATH})
log = logging.getLogger("servekit.proxy")
CLIENT_CLOSED = "499"  # nginx's status for "the client closed the connection first"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def log_refusal(request: web.Request, err: ProxyError) -> None:
    """One line per request the proxy refused as the client's fault (4xx), rate-limited."""
    if err.status < 500:
        request.app[BAD_REQUESTS].log(
            logging.INFO, "refused %s %s from %s: %d %s: %s", request.method,
            printable(request.path, 100), request.remote, err.status, err.kind,
            printable(err.message),
        )  # fmt: skip


async def _too_costly(raw: bytes, limit: int) -> int:
    """The parse cost of ``raw``; a 413 when it passes ``--max-parse-bytes``."""
    cost = await parse_cost_yielding(raw)
    if cost > limit:
        msg = (
            f"request body would take about {cost >> 20} MiB once parsed, more than "
            f"--max-parse-bytes ({limit} bytes); send fewer, larger values"
        )
        raise ProxyError("payload_too_large", "proxy", msg)
    return cost


async def _read_ticket(
    request: web.Request, router: Router
) -> tuple[Ticket, dict[int, list[int]] | None]:
    """The request's body read, parsed and checked: on the loop, or in a parse worker when
    it is big (:mod:`servekit.proxy.parsepool`); the same refusals either way. With the
    kv-events policy, the worker also keys a token-id prompt's blocks (second item)."""
    cfg = router.config
    raw = await read_request(request, cfg.max_body_bytes, cfg.body_timeout_s)
    cost = await _too_costly(raw, cfg.max_parse_bytes)
    charge(cost - len(raw))  # the parsed body lives as long as the request
    workers = request.app[WORKERS]
    if workers.wanted(len(raw)):
        route = request.path
        sizes = tuple(router.kv.block_sizes()) if router.kv is not None else ()
        got = await workers.call(
            parsepool.parse_request, route, raw, cfg.prefix_chars, sizes, cost=cost
        )
        if isinstance(got, parsepool.Refusal):
            raise ProxyError(got.kind, "proxy", got.message)
        refund(max(0, cost - len(raw) - got.text_bytes))  # only the values' text is held
        return Ticket(route, got.body, raw, *got[1:5]), got.keys
    try:
        body = jsoncodec.loads(raw)
    except (ValueError, RecursionError):
        raise ProxyError("bad_request", "proxy", "request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ProxyError("bad_request", "proxy", "request body must be a JSON object")
    check_request(request.path, body)
    return make_ticket(request.path, body, cfg.prefix_chars, raw), None


async def _serve(router: Router, request: web.Request, progress: Progress) -> web.StreamResponse:
    ticket, keys = await _read_ticket(request, router)
    handler = handler_for(router.config.mode)  # None: replica mode
    if router.kv is not None:  # the kv-events policy routes by the prompt's token ids
        pool = router.pools["replica" if handler is None else "prefill"]
        ticket = await router.kv.keyed(ticket, pool.routable(), keys)
    return await serve(request, router, ticket, progress, handler)


async def generation(request: web.Request) -> web.StreamResponse:
    """POST /v1/completions, /v1/chat/completions, /v1/responses."""
    router = request.app[ROUTER]
    started = time.perf_counter()
    progress = Progress()
    try:
        resp = await _serve(router, request, progress)
        if progress.first_byte_at is not None:
            router.metrics.ttft.labels(request.path).observe(progress.first_byte_at - started)
            if router.autoscaler is not None:
                router.autoscaler.sampler.first_byte(progress.first_byte_at - started)
    except ProxyError as err:
        router.metrics.errors.labels(err.stage, err.kind).inc()
        log_refusal(request, err)
        resp = error_response(err)
    except Answer as answer:
        router.metrics.errors.labels("backend", f"http_{answer.status}").inc()
        resp = web.Response(
            status=answer.status, body=answer.body, headers={"Content-Type": answer.content_type}
        )
    except asyncio.CancelledError:  # the client went away: aiohttp cancels the handler
        router.metrics.disconnects.labels(progress.stage).inc()
        router.metrics.requests.labels(request.path, CLIENT_CLOSED).inc()
        raise
    router.metrics.requests.labels(request.path, str(resp.status)).inc()
    router.metrics.latency.labels(request.path).observe(time.perf_counter() - started)
    return resp


def health_doc(router: Router) -> tuple[int, dict[str, object]]:
    """The /health answer: healthy counts per role, 503 when a stage has none."""
    counts = {f"{role}_instances": pool.healthy_count() for role, pool in router.pools.items()}
    in_flight = sum(i.requests for i in router.instances())
    ok = all(counts.values())
    doc: dict[str, object] = {"status": "ok" if ok else "unavailable", **counts}
    doc.update(mode=router.config.mode, in_flight=in_flight)
    return (200 if ok else 503), doc


async def health(request: web.Request) -> web.Response:
    status, doc = health_doc(request.app[ROUTER])
    return web.json_response(doc, status=status)


async def metrics(request: web.Request) -> web.Response:
    router = request.app[ROUTER]
    if router.siblings is not None:  # --workers: every worker's series, labelled
        body = await every_workers_metrics(router, router.siblings)
    else:
        body = router.metrics.render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


def _budget_middleware(budget: Budget, workers: Workers) -> Middleware:
    """Each request holds its bodies' bytes of the one budget until its handler ends (and
    parses its big bodies in ``workers``)."""

    @web.middleware
    async def hold(request: web.Request, handler: Handler) -> web.StreamResponse:
        token = parsepool.CURRENT.set(workers)
        try:
            with holding(budget):
                try:
                    return await handler(request)
                except ProxyError as err:  # a charge refused outside the generation handler
                    return error_response(err)
        finally:
            parsepool.CURRENT.reset(token)

    return hold


def _auth_middleware(api_key: str | None, admin_on: bool, admin_key: str | None) -> Middleware:
    """Admin paths by the admin rule; everything else but probes and scrapes by the API key."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if admin_on and admin.is_admin_path(path):
            refusal = admin.admin_refusal(request, admin_key)
            return refusal if refusal is not None else await handler(request)
        if api_key is None or path in OPEN_PATHS:
            return await handler(request)
        try:
            authorization = admin.authorization(request)
            if not admin.bearer_matches(authorization, api_key):
                raise ProxyError("unauthorized", "proxy", "missing or wrong API key")
        except ProxyError as err:
            log_refusal(request, err)
            return error_response(err)
        return await handler(request)

    return check


def build_app(router: Router) -> web.Application:
    """The aiohttp application around a router (its session is the caller's)."""
    cfg = router.config
    conns = Connections(
        cfg.max_connections, cfg.header_timeout_s,
        RateLimited(log, "shed connections", cfg.log_burst, cfg.log_interval_s),
        cfg.send_timeout_s,
    )  # fmt: skip
    workers = Workers(cfg.parse_workers, cfg.parse_inline_bytes, cfg.parse_worker_rss)
    middlewares = [track(conns), _budget_middleware(router.budget, workers)]
    if cfg.api_key is not None or cfg.admin:
        middlewares.append(_auth_middleware(cfg.api_key, cfg.admin, cfg.admin_key))
    app = web.Application(client_max_size=cfg.max_body_bytes, middlewares=middlewares)
    app[ROUTER] = router
    app[CONNS] = conns
    app[WORKERS] = workers
    app.on_cleanup.append(lambda _app: workers.close())
    if router.kv is not None:
        kv = router.kv
        app.on_startup.append(lambda _app: kv.start())
        app.on_cleanup.append(lambda _app: kv.stop())
    app[BAD_REQUESTS] = RateLimited(log, "bad requests", cfg.log_burst, cfg.log_interval_s)
    router.metrics.watch_connections(conns)
    expect = expect_handler(cfg.max_body_bytes)
    for path in GENERATION_ROUTES:
        app.router.add_post(path, generation, expect_handler=expect)
    app.router.add_get("/health", health)
    app.router.add_get("/healthcheck", health)
    app.router.add_get("/metrics", metrics)
    engine_metrics.add_routes(app, ROUTER)
    passthrough.add_routes(app, ROUTER)
    handler = handler_for(cfg.mode)
    if handler is not None:
        handler.add_routes(app, cfg)
    if cfg.admin:
        admin.add_routes(app, ROUTER)
    return app
