"""The worker processes of one proxy, as each sees the others (``--workers N``).

Workers share the listening port (SO_REUSEPORT: the kernel spreads connections
over them) and nothing else: each has its own event loop, pools, health, load
counts and KV-event index. What must be one for the whole proxy goes over a
private channel, a Unix socket per worker in a folder only the proxy's user can
enter, each request carrying a token the parent drew before it started them:

- an admin change (add, remove, drain, undrain, leave) that one worker received
  is applied by every worker, and a ``leave``'s wait covers all of them;
- ``/metrics`` on any worker answers every worker's series, each labelled
  ``proxy_worker`` (a scrape lands on one of them at random);
- the autoscaler sums every worker's need (each sees a share of the traffic);
- a worker that starts again (the parent restarts one that died) catches up on
  the admin changes made before it, from a sibling.

A sibling that does not answer within :data:`TIMEOUT_S` is left out of that
answer (it may be restarting); the rest go on.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

log = logging.getLogger("servekit.proxy")
TOKEN_HEADER = "X-Servekit-Sibling"
TIMEOUT_S = 5.0
MAX_ANSWER_BYTES = 64 << 20
WORKER_LABEL = "proxy_worker"


@dataclass(frozen=True)
class WorkerPlan:
    """Who this worker is and where its siblings listen."""

    index: int
    count: int
    folder: str  # the private folder of the sockets
    token: str

    def socket(self, index: int) -> str:
        return str(Path(self.folder) / f"w{index}.sock")

    @property
    def others(self) -> list[int]:
        return [i for i in range(self.count) if i != self.index]


class Siblings:
    """Requests to the other workers of this proxy, over their Unix sockets."""

    def __init__(self, plan: WorkerPlan) -> None:
        self.plan = plan
        self._sessions: dict[int, aiohttp.ClientSession] = {}

    def _session(self, index: int) -> aiohttp.ClientSession:
        found = self._sessions.get(index)
        if found is None or found.closed:
            connector = aiohttp.UnixConnector(path=self.plan.socket(index))
            found = self._sessions[index] = aiohttp.ClientSession(connector=connector)
        return found

    async def close(self) -> None:
        for session in self._sessions.values():
            await session.close()

    async def _call(self, index: int, method: str, path: str, doc: Any = None,
                    timeout_s: float = TIMEOUT_S) -> tuple[int, bytes] | None:  # fmt: skip
        headers = {TOKEN_HEADER: self.plan.token}
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        try:
            async with self._session(index).request(
                method, f"http://worker{index}{path}", json=doc, headers=headers, timeout=timeout
            ) as resp:
                body = await resp.content.read(MAX_ANSWER_BYTES + 1)
                if len(body) > MAX_ANSWER_BYTES:
                    return None
                return resp.status, body
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None

    async def _all(self, method: str, path: str, doc: Any = None,
                   timeout_s: float = TIMEOUT_S) -> dict[int, tuple[int, bytes]]:  # fmt: skip
        others = self.plan.others
        got = await asyncio.gather(*(self._call(i, method, path, doc, timeout_s) for i in others))
        return {i: answer for i, answer in zip(others, got, strict=True) if answer is not None}

    async def fan_out(self, action: str, doc: Any, wait_s: float) -> dict[int, Any]:
        """Apply an admin change on every other worker; each one's answer (missing: it
        did not answer)."""
        answers = await self._all("POST", f"/sibling/admin/{action}", doc, TIMEOUT_S + wait_s)
        return {i: _json(body) for i, (status, body) in answers.items() if status == 200}

    async def pages(self) -> dict[int, str]:
        """Every other worker's own /metrics page."""
        answers = await self._all("GET", "/sibling/metrics")
        return {i: body.decode("utf-8", "replace") for i, (s, body) in answers.items() if s == 200}

    async def needs(self) -> list[dict[str, Any]]:
        """Every other worker's autoscale needs, by role."""
        answers = await self._all("GET", "/sibling/needs", timeout_s=1.0)
        found = [_json(body) for status, body in answers.values() if status == 200]
        return [doc for doc in found if isinstance(doc, dict)]

    async def members(self) -> list[dict[str, Any]] | None:
        """The membership of the first sibling that answers (None: none did)."""
        for index in self.plan.others:
            answer = await self._call(index, "GET", "/sibling/members")
            if answer is not None and answer[0] == 200:
                doc = _json(answer[1])
                if isinstance(doc, list):
                    return doc
        return None


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None
