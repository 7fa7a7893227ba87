"""What every check sees: the deployment, the wire, the evidence, the options.

A :class:`Probe` is the check's handle: each request it sends is recorded as
evidence under the check's id and timed, so no check can forget to keep what
it judged. Checks share :attr:`Env.state` for work done once per run (a
calibrated prompt, the turns of a conversation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from servekit.accept.evidence import EvidenceStore
from servekit.accept.models import EvidenceFile
from servekit.accept.options import AcceptOptions
from servekit.accept.wire import Exchange, Wire
from servekit.deployment import Deployment, Endpoint
from servekit.vocabulary import ROLES


def base_url(url: str) -> str:
    """An endpoint URL without a trailing slash or ``/v1``."""
    trimmed = url.rstrip("/")
    return re.sub(r"/v1$", "", trimmed)


@dataclass
class Env:
    """Shared, read-mostly context of one run."""

    deployment: Deployment
    options: AcceptOptions
    wire: Wire
    store: EvidenceStore
    model: str | None = None
    max_model_len: int | None = None
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def entry(self) -> str:
        return base_url(self.deployment.entry_url)

    def engines(self) -> tuple[Endpoint, ...]:
        """The engine API servers (not the proxy, not the reference)."""
        return tuple(e for e in self.deployment.endpoints if e.role in ROLES)

    @property
    def tokenize_base(self) -> str:
        """Where /tokenize goes: an engine (a proxy may not offer it), else the entry."""
        engines = self.engines()
        if not engines or not self.deployment.direct:
            return self.entry
        return base_url(engines[0].url)


class Probe:
    """One check's view of the run: sends requests and keeps them as evidence."""

    def __init__(self, env: Env, check_id: str) -> None:
        self.env = env
        self.check_id = check_id
        self.evidence: list[EvidenceFile] = []
        self._elapsed: list[float] = []
        self._ttft: list[float] = []

    @property
    def options(self) -> AcceptOptions:
        return self.env.options

    def _keep(self, exchange: Exchange) -> Exchange:
        self.evidence.extend(self.env.store.record(self.check_id, exchange))
        self._elapsed.append(exchange.elapsed_s)
        if exchange.frames and exchange.ttft_s is not None:
            self._ttft.append(exchange.ttft_s)
        return exchange

    def timings(self) -> dict[str, float]:
        """Request count and wall time of what this check sent (for the result)."""
        if not self._elapsed:
            return {}
        found = {
            "requests": float(len(self._elapsed)),
            "request_s_total": round(sum(self._elapsed), 6),
            "request_s_max": round(max(self._elapsed), 6),
        }
        if self._ttft:
            found["ttft_s_first"] = round(self._ttft[0], 6)
        return found

    async def get(self, url: str) -> Exchange:
        return self._keep(await self.env.wire.get(url))

    async def post(self, url: str, payload: dict[str, Any]) -> Exchange:
        return self._keep(await self.env.wire.post(url, payload))

    async def stream(self, url: str, payload: dict[str, Any]) -> Exchange:
        return self._keep(await self.env.wire.stream(url, payload))

    def chat(
        self, messages: list[dict[str, Any]], *, max_tokens: int | None = None, **extra: Any
    ) -> dict[str, Any]:
        """A greedy chat request body for the served model."""
        body: dict[str, Any] = {
            "model": self.env.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": max_tokens or self.options.max_tokens,
        }
        body.update(extra)
        return body

    def completion(self, prompt: str, *, max_tokens: int = 24, **extra: Any) -> dict[str, Any]:
        """A greedy completions request body (no chat template needed)."""
        body: dict[str, Any] = {
            "model": self.env.model,
            "prompt": prompt,
            "temperature": 0,
            "max_tokens": max_tokens,
        }
        body.update(extra)
        return body
