"""The bootstrap protocol (vLLM's MooncakeConnector): KV held under the proxy's transfer id.

The prefill holds its blocks under the ``transfer_id`` the proxy sent and
answers no params (its producer is a bootstrap server); a decoder names the id,
the engine and that server (servekit.sim.pd.KvRegistry.claim).

Engines of their own processes (``sim serve``, ``kv_peers: any``) cannot look into
each other's registry, so they do what vLLM 0.32's connector does between machines:

- a prefill runs a **worker side channel** on a port the system picks (the
  connector's ``bind_to_random_port``: a new one every time the engine starts), where
  a decoder's pull of a transfer id is served once the prefill holds it (waiting for
  it up to the KV hold timeout, as the sender waits for the request to be ready);
- it runs the **bootstrap server** (``VLLM_MOONCAKE_BOOTSTRAP_PORT``, which the Plan
  sets; one per API server under external DP, rank 0's for all ranks otherwise):
  ``GET /query`` answers ``{key: {"engine_id": ..., "worker_addr": {tp_rank: {pp_rank:
  "tcp://host:port"}}}}`` (``MooncakeBootstrapServer.query``), each entry naming the
  engine id of its command line as vLLM's engine core makes it per DP rank
  (``<id>_dp<rank>`` when DP > 1: :func:`servekit.kvprotocol.kv_engine_id`) and the
  side channel's address;
- a decoder given an engine id it has not met asks the ``remote_bootstrap_addr`` it
  was given (``_connect_to_prefiller_bootstrap``: one query per server at a time) and
  keeps what it answers **for good**, id -> worker addresses, as the connector's
  ``_remote_agents``; when the id is still unknown the load fails, as
  ``handle_new_engine_id``'s "remote engine_id ... not found from bootstrap server ..."
  does under vLLM's default ``kv_load_failure_policy`` "fail": the request ends in an
  internal error. Then it **pulls from the address it keeps** for that id
  (``receive_kv_from_single_worker``); an address where nothing answers (the prefill
  replaced: a new process, a new side channel) fails the load the same way
  ("pulling kv_caches for [...] failed: transfer failed: ..."). vLLM's socket waits its
  receive timeout (VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT + 60 s) before it fails so; the
  simulator fails as soon as the connection is refused.

So a proxy that names an id no prefill serves, or an id a replaced prefill serves
again, fails here as it would on vLLM.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

import aiohttp
from aiohttp import web

from servekit.errors import UsageError
from servekit.kvprotocol import kv_engine_id
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
MAX_WORKERS = 64  # worker addresses kept per engine id (TP x PP ranks)
PULL_PATH = "/sim/kv/pull"
PULL_BYTES = 4 << 10
WORKER_SCHEME = "tcp://"
RECV_SLACK_S = 60.0  # the connector's receive timeout: the abort timeout + 60 s


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
            workers = await _know_engine(ep, params, rid)
            if workers:
                await _pull(ep, workers, str(params.get("transfer_id")), rid)
        return await super().receive(ep, req, rid, digest, prompt_len)


def serves_bootstrap(spec: EndpointSpec) -> bool:
    """Whether this endpoint runs a bootstrap server: a bootstrap-mode prefill of its
    own process with a port to serve it at (each external-DP rank its own; under
    internal DP only the process of rank 0, whose ``bootstrap_ranks`` name every rank)."""
    return has_side_channel(spec) and (spec.bootstrap_port is not None or spec.kv_port > 0)


def has_side_channel(spec: EndpointSpec) -> bool:
    """Whether this endpoint's KV workers serve pulls from other processes."""
    return spec.role == "prefill" and spec.kv_mode == "bootstrap" and spec.kv_peers == "any"


def bootstrap_app(ep: Endpoint) -> web.Application:
    """The prefill's bootstrap server: ``GET /query`` names each rank's engine id and
    its workers' address."""
    spec = ep.spec
    ranks = spec.bootstrap_ranks if spec.bootstrap_ranks is not None else {"0": spec.dp_rank}

    async def query(_: web.Request) -> web.Response:
        address = ep.worker_addr or ""
        answer = {
            key: {
                "engine_id": kv_engine_id(spec.engine, rank, spec.dp_size),
                "worker_addr": {str(t): {"0": address} for t in range(spec.tp)},
            }
            for key, rank in ranks.items()
        }
        return web.json_response(answer)

    app = web.Application()
    app.router.add_get(QUERY_PATH, query)
    return app


def side_channel_app(ep: Endpoint) -> web.Application:
    """The prefill's KV workers: a pull of a transfer id is answered once it is held."""

    async def pull(request: web.Request) -> web.Response:
        try:
            body = await request.content.read(PULL_BYTES + 1)
            doc = json.loads(body) if len(body) <= PULL_BYTES else None
        except (ValueError, RecursionError, aiohttp.ClientPayloadError):
            doc = None
        tid = doc.get("transfer_id") if isinstance(doc, dict) else None
        if not isinstance(tid, str) or not tid or ep.producer is None:
            return web.json_response({"status": "error", "err_msg": "bad transfer request"})
        if ep.dead:
            return web.json_response({"status": "error", "err_msg": "engine dead"})
        wait = ep.profile.kv_hold_timeout_s * ep.clock.time_scale
        if await ep.kvreg.send_transfer(ep.producer, tid, wait):
            return web.json_response({"status": "finish"})
        ep.log.warning("Timeout waiting for P side ready: %s", [tid[:64]])
        return web.json_response({"status": "error", "err_msg": f"transfer {tid[:64]} not held"})

    app = web.Application()
    app.router.add_post(PULL_PATH, pull)
    return app


def _failed(ep: Endpoint, rid: str, reason: str) -> ApiError:
    """vLLM's _handle_failed_recv under kv_load_failure_policy "fail": an internal error."""
    ep.log.error("pulling kv_caches for %s failed: %s", [rid], reason)
    return ApiError(500, "Internal server error (KV load failed)", "InternalServerError")


async def _know_engine(ep: Endpoint, params: dict[str, Any], rid: str) -> tuple[str, ...]:
    """The worker addresses kept for the params' engine (a bootstrap server named it, now
    or before); the load fails when none did. Empty: not the bootstrap shape (the claim
    refuses it: KVTransferError)."""
    engine, addr = params.get("remote_engine_id"), params.get("remote_bootstrap_addr")
    if not isinstance(engine, str) or not isinstance(addr, str):
        return ()
    reg = ep.kvreg
    if engine in reg.remote_engines:
        return reg.remote_engines[engine]
    pending = reg.bootstrap_queries.get(addr)
    if pending is None:
        pending = asyncio.ensure_future(_query(ep, reg, addr))
        reg.bootstrap_queries[addr] = pending
        pending.add_done_callback(lambda _: reg.bootstrap_queries.pop(addr, None))
    await asyncio.shield(pending)
    if engine not in reg.remote_engines:
        reason = f"remote engine_id {engine} not found from bootstrap server {addr}"
        raise _failed(ep, rid, reason)
    return reg.remote_engines[engine]


async def _pull(ep: Endpoint, workers: tuple[str, ...], transfer_id: str, rid: str) -> None:
    """Pull the transfer from each worker kept for the engine (the load fails on any)."""
    wait = (ep.profile.kv_hold_timeout_s + RECV_SLACK_S) * ep.clock.time_scale
    timeout = aiohttp.ClientTimeout(total=wait)
    for worker in workers:
        try:
            url = check_url("http://" + worker.removeprefix(WORKER_SCHEME), "worker_addr")
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(url + PULL_PATH, json={"transfer_id": transfer_id}) as resp,
            ):
                body = await resp.content.read(PULL_BYTES + 1)
            doc = json.loads(body) if len(body) <= PULL_BYTES else None
        except UsageError as exc:
            raise _failed(ep, rid, f"transfer failed: {exc.message}") from None
        except (aiohttp.ClientError, TimeoutError, ValueError, RecursionError) as exc:
            raise _failed(ep, rid, f"transfer failed: {type(exc).__name__}: {exc}") from None
        status = doc.get("status") if isinstance(doc, dict) else None
        if status != "finish":
            msg = doc.get("err_msg") if isinstance(doc, dict) else None
            raise _failed(ep, rid, str(msg)[:200] if msg else "transfer error")


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
    """The engine ids of a ``/query`` answer ({key: {"engine_id": ..., "worker_addr":
    {tp_rank: {pp_rank: "tcp://host:port"}}}}), each with its workers' addresses."""
    if not isinstance(doc, dict):
        raise ValueError("answer is not an object")
    for entry in doc.values():
        engine = entry.get("engine_id") if isinstance(entry, dict) else None
        if not isinstance(engine, str):
            continue
        workers = _workers(entry.get("worker_addr"))
        if workers:
            reg.remote_engines[engine] = workers
    while len(reg.remote_engines) > MAX_KNOWN:
        del reg.remote_engines[next(iter(reg.remote_engines))]


def _workers(doc: object) -> tuple[str, ...]:
    """The distinct worker addresses of one entry (TP x PP), in order; none when malformed."""
    if not isinstance(doc, dict):
        return ()
    found: dict[str, None] = {}
    for per_pp in doc.values():
        if not isinstance(per_pp, dict):
            return ()
        for addr in per_pp.values():
            if not isinstance(addr, str) or not addr.startswith(WORKER_SCHEME):
                return ()
            found[addr[:300]] = None
    return tuple(found)[:MAX_WORKERS]
