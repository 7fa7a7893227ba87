"""Is an endpoint ready? Health answers 200 and /v1/models lists the served model.

Both halves matter: vLLM's API server answers /health before the model is listed
on some paths, and a proxy answers /health with no model of its own. One probe
is one short HTTP exchange; the supervisor decides how often to ask.
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


async def probe_all(targets: list[ReadyTarget], timeout_s: float = 2.0) -> list[Probe]:
    """Probe every target concurrently over one session."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        return list(await asyncio.gather(*(probe(session, t) for t in targets)))
