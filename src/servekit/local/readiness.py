"""Is an endpoint ready? Health answers 200 and /v1/models lists the served model.

Both halves matter: vLLM's API server answers /health before the model is listed
on some paths. A proxy has no model of its own; it is ready when its /health
answers 200 and counts every backend it was given as healthy (a proxy that has
admitted one replica of two would send all traffic to that one). One probe is
one short HTTP exchange; the supervisor decides how often to ask.
"""

from __future__ import annotations

import asyncio
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
