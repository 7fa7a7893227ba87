"""The bootstrap protocol (vLLM's MooncakeConnector): KV held under the proxy's transfer id.

The prefill holds its blocks under the ``transfer_id`` the proxy sent and
answers no params (its producer is a bootstrap server); a decoder names the id,
the engine and that server (servekit.sim.pd.KvRegistry.claim).

Engines of their own processes (``sim serve``, ``kv_peers: any``) cannot look into
each other's registry, so they do what vLLM 0.32's connector does between machines:

- a prefill runs the **bootstrap server** (its DP rank 0, at its ``kv_port``, which
  the Plan sets as ``VLLM_MOONCAKE_BOOTSTRAP_PORT``): ``GET /query`` answers
  ``{dp_rank: {"engine_id": ..., "worker_addr": {tp_rank: {pp_rank: addr}}}}``
  (``MooncakeBootstrapServer.query``), naming the engine id from its own command line;
- a decoder given an engine id it has not met asks the ``remote_bootstrap_addr`` it
  was given (``_connect_to_prefiller_bootstrap``: one query per server at a time,
  what it answers kept for good, as the connector's ``_remote_agents``), and when the
  id is still unknown the load fails, as ``handle_new_engine_id``'s "remote engine_id
  ... not found from bootstrap server ..." does under vLLM's default
  ``kv_load_failure_policy`` "fail": the request ends in an internal error. So a proxy
  that names an id no prefill serves fails here as it would on vLLM.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

import aiohttp
from aiohttp import web

from servekit.errors import UsageError
from servekit.sim.openai import ApiError, GenRequest
from servekit.sim.pd import KvRegistry
from servekit.sim.protocols.base import Endpoint
from servekit.sim.protocols.pull import Pull
from servekit.sim.spec import EndpointSpec
from servekit.vocabulary import KvProtocol, check_url

QUERY_PATH = "/query"
QUERY_BYTES = 64 << 10  # an answer names a few engines; more is not a bootstrap server's
QUERY_TIMEOUT_S = 5.0
QUERY_TRIES = 3  # the connector retries a failed connection (0.1 s, doubling)
MAX_KNOWN = 4096  # engine ids a decoder keeps (the connector keeps every one it met)


class Bootstrap(Pull):
    protocol: ClassVar[KvProtocol] = "bootstrap"

    def ready(self, ep: Endpoint, params: dict[str, Any]) -> bool:
        if not params.get("transfer_id"):
            ep.log.warning("Missing transfer_id in kv_transfer_params from router!")
            return False
        return True

    async def receive(
        self, ep: Endpoint, req: GenRequest, rid: str, digest: int, prompt_len: int
    ) -> float | None:
        params = req.kv_transfer_params or {}
        if params.get("do_remote_prefill") and ep.any_peer:
            await _know_engine(ep, params, rid)
        return await super().receive(ep, req, rid, digest, prompt_len)


def serves_bootstrap(spec: EndpointSpec) -> bool:
    """Whether this endpoint runs the bootstrap server: a bootstrap-mode prefill of its
    own process, on its DP rank 0 (vLLM starts one per engine), with a port to serve."""
    return (
        spec.role == "prefill"
        and spec.kv_mode == "bootstrap"
        and spec.kv_peers == "any"
        and spec.dp_rank == 0
        and spec.kv_port > 0
    )


def bootstrap_app(ep: Endpoint) -> web.Application:
    """The prefill's bootstrap server: ``GET /query`` names its engine id and workers."""
    spec = ep.spec
    address = f"{spec.host}:{spec.side_port}"
    answer = {
        str(spec.dp_rank): {
            "engine_id": spec.engine,
            "worker_addr": {str(t): {"0": address} for t in range(spec.tp)},
        }
    }

    async def query(_: web.Request) -> web.Response:
        return web.json_response(answer)

    app = web.Application()
    app.router.add_get(QUERY_PATH, query)
    return app


async def _know_engine(ep: Endpoint, params: dict[str, Any], rid: str) -> None:
    """The params' engine is one a bootstrap server named; else the load fails."""
    engine, addr = params.get("remote_engine_id"), params.get("remote_bootstrap_addr")
    if not isinstance(engine, str) or not isinstance(addr, str):
        return  # not the bootstrap shape: the claim refuses it (KVTransferError)
    reg = ep.kvreg
    if engine in reg.remote_engines:
        return
    pending = reg.bootstrap_queries.get(addr)
    if pending is None:
        pending = asyncio.ensure_future(_query(ep, reg, addr))
        reg.bootstrap_queries[addr] = pending
        pending.add_done_callback(lambda _: reg.bootstrap_queries.pop(addr, None))
    await asyncio.shield(pending)
    if engine not in reg.remote_engines:
        reason = f"remote engine_id {engine} not found from bootstrap server {addr}"
        ep.log.error("pulling kv_caches for %s failed: %s", [rid], reason)
        raise ApiError(500, "Internal server error (KV load failed)", "InternalServerError")


async def _query(ep: Endpoint, reg: KvRegistry, addr: str) -> None:
    """``GET {addr}/query``: every engine id it names is known after (none on a failure)."""
    try:
        addr = check_url(addr, "remote_bootstrap_addr")
    except UsageError as exc:
        ep.log.error("Failed to connect to bootstrap server: %s", exc.message)
        return
    timeout = aiohttp.ClientTimeout(total=QUERY_TIMEOUT_S)
    delay = 0.1
    for attempt in range(1, QUERY_TRIES + 1):
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.get(addr + QUERY_PATH) as resp,
            ):
                resp.raise_for_status()
                body = await resp.content.read(QUERY_BYTES + 1)
            if len(body) > QUERY_BYTES:
                raise ValueError(f"answer larger than {QUERY_BYTES} bytes")
            _learn(reg, json.loads(body))
            return
        except aiohttp.ClientConnectionError as exc:
            if attempt == QUERY_TRIES:
                ep.log.error("Failed to connect to bootstrap server %s (%s)", addr, exc)
                return
            await asyncio.sleep(delay)
            delay *= 2
        except (aiohttp.ClientError, TimeoutError, ValueError, RecursionError) as exc:
            ep.log.error("Failed to connect to bootstrap server %s (%s: %s)", addr,
                         type(exc).__name__, exc)  # fmt: skip
            return


def _learn(reg: KvRegistry, doc: object) -> None:
    """The engine ids of a ``/query`` answer ({dp_rank: {"engine_id": ...}})."""
    if not isinstance(doc, dict):
        raise ValueError("answer is not an object")
    for entry in doc.values():
        engine = entry.get("engine_id") if isinstance(entry, dict) else None
        if isinstance(engine, str):
            reg.remote_engines[engine] = None
    while len(reg.remote_engines) > MAX_KNOWN:
        del reg.remote_engines[next(iter(reg.remote_engines))]
