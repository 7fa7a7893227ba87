"""Engine endpoints the proxy relays as they are: models, tokenizer, prefix cache.

Every instance serves the same model and tokenizer, so ``/v1/models``,
``/tokenize`` and ``/detokenize`` go to one healthy instance (decode or replica
first, which are the ones clients talk to). ``/reset_prefix_cache`` goes to
every healthy instance, so a cold run really is cold on both PD stages. Bodies
both ways are bounded as for generation (:mod:`servekit.proxy.bodies`).
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from servekit.proxy.bodies import expect_handler, read_answer, read_request
from servekit.proxy.failures import ProxyError, error_response
from servekit.proxy.instances import Instance
from servekit.proxy.router import Router


def _candidates(router: Router) -> list[Instance]:
    insts = [i for i in router.instances() if i.routable]
    return sorted(insts, key=lambda i: i.role == "prefill")  # decode or replica first


async def relay_one(router: Router, request: web.Request) -> web.Response:
    """Send the request to the first healthy instance that answers; pass its answer back."""
    cfg = router.config
    try:
        data = await read_request(request, cfg.max_body_bytes, cfg.body_timeout_s)
    except ProxyError as err:
        return error_response(err)
    timeout = aiohttp.ClientTimeout(total=router.config.prefill_timeout_s)
    headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
    for inst in _candidates(router):
        try:
            async with router.session.request(
                request.method, inst.url + request.path_qs, data=data or None,
                headers={**headers, **router.headers}, timeout=timeout,
            ) as resp:  # fmt: skip
                who = router.describe(inst)
                body = await read_answer(resp, cfg.max_answer_bytes, who, inst.role)
                ctype = resp.headers.get("Content-Type", "application/json")
                return web.Response(status=resp.status, body=body, headers={"Content-Type": ctype})
        except ProxyError as err:
            return error_response(err)
        except (aiohttp.ClientError, TimeoutError):
            continue
    return error_response(
        ProxyError("no_healthy_instance", "proxy", f"no backend served {request.path}")
    )


async def fan_out(router: Router, request: web.Request) -> web.Response:
    """POST to every healthy instance; 200 only when all of them said 2xx."""
    timeout = aiohttp.ClientTimeout(total=router.config.health_timeout_s * 5)
    targets = [i for i in router.instances() if i.routable]

    async def one(inst: Instance) -> bool:
        try:
            async with router.session.post(
                inst.url + request.path_qs, headers=router.headers, timeout=timeout
            ) as resp:
                await read_answer(resp, router.config.max_answer_bytes, inst.name, inst.role)
                return resp.status < 300
        except (aiohttp.ClientError, TimeoutError, ProxyError):
            return False

    results = await asyncio.gather(*(one(i) for i in targets))
    failed = [router.describe(i) for i, ok in zip(targets, results, strict=True) if not ok]
    if failed or not targets:
        msg = f"{request.path} failed on: {', '.join(failed) or 'no healthy instance'}"
        return error_response(ProxyError("upstream_error", "proxy", msg))
    return web.json_response({"instances": len(targets)})


def add_routes(app: web.Application, key: web.AppKey[Router]) -> None:
    async def one(request: web.Request) -> web.Response:
        return await relay_one(request.app[key], request)

    async def every(request: web.Request) -> web.Response:
        return await fan_out(request.app[key], request)

    app.router.add_get("/v1/models", one)
    router = app[key]
    expect = expect_handler(router.config.max_body_bytes)
    app.router.add_post("/tokenize", one, expect_handler=expect)
    app.router.add_post("/detokenize", one, expect_handler=expect)
    app.router.add_post("/reset_prefix_cache", every)
