"""The proxy's HTTP surface: generation routes, /health and /metrics.

Handlers turn the outcome of a :class:`~servekit.proxy.stages.Trip` into a
response and count it; admin routes live in :mod:`servekit.proxy.admin`, relayed
engine endpoints (models, tokenizer, prefix cache) in :mod:`servekit.proxy.passthrough`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from servekit.proxy import admin, passthrough
from servekit.proxy.failures import ProxyError
from servekit.proxy.requests import make_ticket, prompt_count
from servekit.proxy.router import Router
from servekit.proxy.stages import Answer, Trip

ROUTER = web.AppKey("router", Router)
GENERATION_ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/responses")
OPEN_PATHS = frozenset({"/health", "/healthcheck", "/metrics"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(err: ProxyError) -> web.Response:
    return web.Response(status=err.status, body=err.body(), content_type="application/json")


async def _read_body(request: web.Request) -> tuple[dict[str, Any], bytes]:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        msg = "request body exceeds --max-body-bytes"
        raise ProxyError("payload_too_large", "proxy", msg) from None
    try:
        body = json.loads(raw)
    except ValueError:
        raise ProxyError("bad_request", "proxy", "request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ProxyError("bad_request", "proxy", "request body must be a JSON object")
    return body, raw


async def _run_trip(router: Router, request: web.Request) -> tuple[web.StreamResponse, Trip]:
    body, raw = await _read_body(request)
    ticket = make_ticket(request.path, body, router.config.prefix_chars, raw)
    trip = Trip(router, request, ticket)
    mode = router.config.mode
    if mode == "pd" and prompt_count(body) > 1:
        # Prompts of one request would share the prefill's remote_block_ids: vLLM asserts.
        msg = "prompt: PD mode serves one prompt per request; send the prompts separately"
        raise ProxyError("bad_request", "proxy", msg)
    if mode == "replica":
        return await trip.generate("replica", raw), trip
    return await trip.pd(with_kv_params=mode == "pd"), trip


async def generation(request: web.Request) -> web.StreamResponse:
    """POST /v1/completions, /v1/chat/completions, /v1/responses."""
    router = request.app[ROUTER]
    started = time.perf_counter()
    try:
        resp, trip = await _run_trip(router, request)
        if trip.first_byte_at is not None:
            router.metrics.ttft.labels(request.path).observe(trip.first_byte_at - started)
    except ProxyError as err:
        router.metrics.errors.labels(err.stage, err.kind).inc()
        resp = error_response(err)
    except Answer as answer:
        router.metrics.errors.labels("backend", f"http_{answer.response.status}").inc()
        resp = answer.response
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
    body = request.app[ROUTER].metrics.render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


def _auth_middleware(api_key: str) -> Middleware:
    expected = f"Bearer {api_key}"

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in OPEN_PATHS and request.headers.get("Authorization") != expected:
            return error_response(ProxyError("unauthorized", "proxy", "missing or wrong API key"))
        return await handler(request)

    return check


def build_app(router: Router) -> web.Application:
    """The aiohttp application around a router (its session is the caller's)."""
    middlewares = [_auth_middleware(router.config.api_key)] if router.config.api_key else []
    app = web.Application(client_max_size=router.config.max_body_bytes, middlewares=middlewares)
    app[ROUTER] = router
    for path in GENERATION_ROUTES:
        app.router.add_post(path, generation)
    app.router.add_get("/health", health)
    app.router.add_get("/healthcheck", health)
    app.router.add_get("/metrics", metrics)
    passthrough.add_routes(app, ROUTER)
    admin.add_routes(app, ROUTER)
    return app
