"""What every workload needs: the client, prompts, settings and progress.

One :class:`BenchContext` per benchmark run, so every workload shares the one
client (one connection pool) and one prompt-id counter (no prefix is ever
reused within a run). Requests go to the deployment's entry (the proxy for
PD); /tokenize and /metrics go to its engine endpoints when it lists them, or,
when they are reached only through the proxy, to the proxy (its /tokenize and
its /metrics/engines relay).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from servekit.bench.config import RunSettings
from servekit.bench.load import run_concurrent, stream_body
from servekit.bench.prompts import PromptBuilder
from servekit.bench.records import RequestRow
from servekit.bench.sampler import MetricsSource, RelaySource, wait_idle
from servekit.client import OpenAIClient, RequestRecord
from servekit.deployment import RELAY_PATH, Deployment, Endpoint
from servekit.vocabulary import ROLES

ProgressFn = Callable[[str, int, int], None]
"""Called as (what is running, runs done, runs in total)."""


def quiet(what: str, done: int, total: int) -> None:
    """Default progress sink: report nothing."""


@dataclass
class BenchContext:
    """Shared state of one benchmark run."""

    client: OpenAIClient
    deployment: Deployment
    settings: RunSettings
    model: str | None = None
    progress: ProgressFn = quiet
    prompts: PromptBuilder = field(init=False)
    metrics: MetricsSource = field(init=False)
    idle_checked: bool = True
    rows: list[RequestRow] = field(default_factory=list)
    """Every measured request, for ``requests.jsonl`` (servekit.bench.records)."""

    def __post_init__(self) -> None:
        engines = self.engines
        # A fresh tag per benchmark run: ids restart at 0 in every run, and a
        # rerun against the same server would otherwise send the same prompts
        # and be served from its prefix cache.
        tag = secrets.token_hex(3)
        relay = self.deployment.metrics_relay
        if engines and not self.deployment.direct and relay:
            # The engines are out of reach: the proxy relays /tokenize and their metrics.
            proxy = self.client.derive(relay.removesuffix(RELAY_PATH))
            self.prompts = PromptBuilder(self.client, tag=tag)
            self.metrics = RelaySource(proxy, RELAY_PATH, [(e.url, e.role) for e in engines])
            return
        engine_clients = [self.client.derive(e.url) for e in engines] or [self.client]
        roles: list[str] = [e.role for e in engines] or ["engine"]
        # The proxy may offer neither /tokenize nor vLLM metrics: ask the engines.
        self.prompts = PromptBuilder(engine_clients[0], tag=tag)
        self.metrics = MetricsSource(engine_clients, roles)

    @property
    def engines(self) -> list[Endpoint]:
        """The deployment's engine endpoints (not the proxy, not a reference)."""
        return [e for e in self.deployment.endpoints if e.role in ROLES]

    @property
    def legs_per_request(self) -> int:
        """Engine requests one client request makes: 2 through a PD proxy (prefill, decode)."""
        return 2 if self.deployment.is_pd else 1

    def body(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        """A greedy ignore_eos streamed completion body for this target's model."""
        return stream_body(prompt, max_tokens, self.model)

    async def wait_idle(self) -> None:
        """Wait until the engine is idle; remember if the target cannot say."""
        known = await wait_idle(self.metrics, self.settings.idle_timeout_s)
        self.idle_checked = self.idle_checked and known

    async def warm_up(self, prompt_tokens: int, output_tokens: int) -> list[RequestRecord]:
        """Send the configured warm-up requests (results discarded, never measured)."""
        n = self.settings.warmup
        if n <= 0:
            return []
        prompts = await self.prompts.build_many(prompt_tokens, n)
        bodies = [self.body(p, output_tokens) for p in prompts]
        records, _ = await run_concurrent(self.client, bodies, 1)
        return records
