"""Is an endpoint ready? Health answers 200 and /v1/models lists the served model.

Both halves matter: vLLM's API server answers /health before the model is listed
on some paths. A proxy has no model of its own; it is ready when its /health
answers 200 and counts every backend it was given as healthy (a proxy that has
admitted one replica of two would send all traffic to that one). One probe is
one short HTTP exchange; :func:`poll_ready` repeats them until every target is
ready or time runs out, and is the one readiness loop of the simulated stacks
(``accept``'s proxy, ``verify --dry-run``'s fake cluster); the local supervisor
runs its own rounds of :func:`probe_all`, recording each process's detail.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import aiohttp


@dataclass(frozen=True)
class ReadyTarget:
    """An endpoint to wait for; ``model`` None means health alone decides."""

    process: str
    url: str
    model: str | None
    backends: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Probe:
    ready: bool
    detail: str


async def probe(session: aiohttp.ClientSession, target: ReadyTarget) -> Probe:
    """One readiness check of ``target``; never raises for network trouble."""
    try:
        async with session.get(f"{target.url}/health") as resp:
            if resp.status != 200:
                return Probe(False, f"/health answered {resp.status}")
            health = await resp.json(content_type=None) if target.backends else None
        if target.backends:
            return judge_backends(health, target.backends)
        if target.model is None:
            return Probe(True, "health 200")
        async with session.get(f"{target.url}/v1/models") as resp:
            if resp.status != 200:
                return Probe(False, f"/v1/models answered {resp.status}")
            doc = await resp.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        return Probe(False, f"not answering ({type(exc).__name__})")
    ids = [m.get("id") for m in doc.get("data", []) if isinstance(m, dict)]
    if target.model not in ids:
        return Probe(False, f"/v1/models lists {ids}, not {target.model!r}")
    return Probe(True, "health 200, model listed")


def judge_backends(health: object, wanted: tuple[tuple[str, int], ...]) -> Probe:
    doc = health if isinstance(health, dict) else {}
    seen = [(key, doc.get(key, 0), n) for key, n in wanted]
    short = [f"{key} {have}/{n}" for key, have, n in seen if not isinstance(have, int) or have < n]
    if short:
        return Probe(False, "backends healthy: " + ", ".join(short))
    return Probe(True, "health 200, all backends healthy")


async def probe_all(targets: list[ReadyTarget], timeout_s: float = 2.0) -> list[Probe]:
    """Probe every target concurrently over one session."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        return list(await asyncio.gather(*(probe(session, t) for t in targets)))


def _probe_round(targets: list[ReadyTarget], timeout_s: float) -> list[Probe]:
    """:func:`probe_all` from sync code, also when called under a running event loop.

    ``accept``'s self-check starts its stack inside a coroutine; ``asyncio.run`` is
    refused there, so the round runs on a worker thread's own loop instead.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(probe_all(targets, timeout_s))
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, probe_all(targets, timeout_s)).result()


def _nothing() -> None:
    return None


def poll_ready(
    targets: Sequence[ReadyTarget],
    timeout_s: float,
    *,
    check: Callable[[], None] = _nothing,
    poll_s: float = 0.25,
    probe_timeout_s: float = 2.0,
) -> list[tuple[ReadyTarget, Probe]]:
    """Probe ``targets`` until all are ready; those still not ready at the deadline.

    ``check`` runs before every round and raises to stop early (a process that
    exited will never become ready). An empty list means every target is ready;
    otherwise each pending target comes with its last probe, for the message.
    """
    deadline = time.monotonic() + timeout_s
    pending = [(t, Probe(False, "not probed yet")) for t in targets]
    while pending:
        check()
        results = _probe_round([t for t, _ in pending], probe_timeout_s)
        pending = [(t, r) for (t, _), r in zip(pending, results, strict=True) if not r.ready]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(poll_s)
    return pending
