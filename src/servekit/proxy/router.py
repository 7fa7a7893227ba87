"""The router: pools, policies and the retry loop shared by every stage.

:meth:`Router.attempt` picks an instance with the stage's policy and runs one
exchange on it. A connection failure (nothing reached the client yet) ejects
the instance and tries another, with exponential backoff, up to
``max_attempts``. Everything else (a timeout, a status code, a client
disconnect) is the exchange's own business and is not retried here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import aiohttp

from servekit.proxy.config import ProxyConfig
from servekit.proxy.failures import ProxyError
from servekit.proxy.health import HealthChecker
from servekit.proxy.instances import Instance, Lease, Pool
from servekit.proxy.metrics import ProxyMetrics
from servekit.proxy.policies import Policy, make_policy

T = TypeVar("T")

# Failures where the backend cannot have produced anything the client saw.
RETRYABLE = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)


class Router:
    """Instance pools per role, their policies and the shared backend session."""

    def __init__(self, config: ProxyConfig, session: aiohttp.ClientSession) -> None:
        self.config = config
        self.session = session
        self.pools = {role: Pool(role) for role in config.stage_roles}
        for role in config.stage_roles:
            for url in getattr(config, role):
                self.pools[role].add(url)
        self.policies: dict[str, Policy] = {
            "prefill": make_policy(config.prefill_policy),
            "decode": make_policy(config.decode_policy),
            "replica": make_policy(config.decode_policy),
        }
        self._tasks: set[asyncio.Task[None]] = set()
        self.headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self.metrics = ProxyMetrics(self.instances)
        self.health = HealthChecker(
            session,
            self.instances,
            interval_s=config.health_interval_s,
            timeout_s=config.health_timeout_s,
            eject_after=config.eject_after,
            readmit_after=config.readmit_after,
            headers=self.headers,
        )

    def probe_soon(self, inst: Instance) -> None:
        """Probe an added or undrained instance now rather than at the next round."""
        task = asyncio.get_running_loop().create_task(self.health.probe(inst))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def instances(self) -> Iterator[Instance]:
        for pool in self.pools.values():
            yield from pool.members

    def release(self, lease: Lease) -> None:
        """Release a lease and drop its instance if it was drained for removal."""
        lease.release()
        if lease.instance.remove_when_idle:
            self.pools[lease.instance.role].reap()

    def describe(self, inst: Instance) -> str:
        return inst.describe(self.config.debug)

    async def attempt(
        self, stage: str, prefix_key: bytes, exchange: Callable[[Instance], Awaitable[T]]
    ) -> T:
        """Run ``exchange`` on a chosen instance, retrying connection failures elsewhere."""
        pool, tried = self.pools[stage], set[Instance]()
        for n in range(self.config.max_attempts):
            candidates = pool.routable(frozenset(tried))
            if not candidates:
                break
            inst = self.policies[stage].choose(candidates, prefix_key)
            try:
                return await exchange(inst)
            except aiohttp.ConnectionTimeoutError:
                pass  # a connect timeout is a connection failure: try elsewhere
            except TimeoutError:
                msg = f"{stage} {self.describe(inst)} timed out"
                raise ProxyError("timeout", stage, msg) from None
            except RETRYABLE:
                pass
            self.health.eject(inst, f"connection error during {stage}")
            tried.add(inst)
            self.metrics.retries.labels(stage).inc()
            if n + 1 < self.config.max_attempts:
                await asyncio.sleep(self.config.retry_backoff_s * 2**n)
        if tried:
            names = ", ".join(sorted(self.describe(i) for i in tried))
            raise ProxyError("connect_failed", stage, f"could not reach {stage} {names}")
        raise ProxyError("no_healthy_instance", stage, f"no healthy {stage} instance")
