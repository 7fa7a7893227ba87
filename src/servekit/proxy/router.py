"""The router: pools, policies, the retry loop and the blame shared by every stage and protocol.

:meth:`Router.attempt` (the one retry loop) picks an instance with the stage's
policy (chosen by name from :data:`~servekit.proxy.policies.POLICIES`) and runs
one exchange on it. A failure that left nothing at the client (a connection
error, a 5xx, a 200 with an empty body) is blamed on the instance and the
exchange is tried on another instance, with exponential backoff, up to
``max_attempts``. A timeout, a 4xx or a client disconnect is the exchange's own
business and is not retried here.

:meth:`Router.blame` is the one place a request's failure is put on an
instance (the retry loop's, and a relayed stream's that broke mid-answer): the
request does not choose it again, and the failure counts against it (outlier
detection) and its failure domain (its siblings suspect until probed).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

import aiohttp

from servekit.proxy.budget import Budget
from servekit.proxy.config import ProxyConfig, parse_bootstrap
from servekit.proxy.demand import Autoscaler
from servekit.proxy.failures import STREAM_INTERRUPTED, Answer, OtherStageFailed, ProxyError
from servekit.proxy.health import HealthChecker
from servekit.proxy.instances import Hold, Instance, Lease, Pool, hold
from servekit.proxy.membership import Membership
from servekit.proxy.metrics import ProxyMetrics
from servekit.proxy.policies import KV_POLICY, Policy, make_policy
from servekit.proxy.siblings import Siblings

if TYPE_CHECKING:
    from servekit.proxy.kvaware import KvRouting

T = TypeVar("T")

# Failures where the backend cannot have produced anything the client saw.
RETRYABLE = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)
LEASE_EXPIRED = "kv_lease_expired"  # the handed-over KV's age, not the instance
POOL_POLL_S = 0.1  # --pool-wait: how often an empty pool is looked at again


class Router:
    """Instance pools per role, their policies and the shared backend session."""

    def __init__(self, config: ProxyConfig, session: aiohttp.ClientSession) -> None:
        self.config = config
        self.session = session
        self.pools = {role: Pool(role) for role in config.stage_roles}
        domains = config.domains()
        for role in config.stage_roles:
            for url in getattr(config, role):
                inst = self.pools[role].add(url)
                inst.engine, inst.node = domains.get(url, (None, None))
        if "prefill" in self.pools:
            for inst, value in zip(self.pools["prefill"].members, config.prefill_bootstrap,
                                   strict=False):  # fmt: skip
                inst.bootstrap = parse_bootstrap(value)
        self.kv = kv_routing(config, session)  # the kv-events policy's indexes, if used
        self.policies: dict[str, Policy] = {
            "prefill": make_policy(config.prefill_policy, self.kv, "prefill"),
            "decode": make_policy(config.decode_policy, self.kv, "decode"),
            "replica": make_policy(config.decode_policy, self.kv, "replica"),
        }
        self._tasks: set[asyncio.Task[bool | None]] = set()
        self.budget = Budget(config.memory_budget)
        self.headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self.metrics = ProxyMetrics(self.instances)
        budget = self.budget
        self.metrics.watch_budget(lambda: budget.used, lambda: budget.refused)
        self.health = HealthChecker(session, self.instances, config, self.headers)
        self.health.on_outlier = lambda inst: self.metrics.ejections.labels(inst.role).inc()
        self.health.on_failure = lambda scope: self.metrics.failures.labels(scope).inc()
        if self.kv is not None:
            self.kv.headers = self.headers
            self.metrics.registry.register(self.kv.collector())
        self.siblings: Siblings | None = None  # --workers: the other processes of this proxy
        self.autoscaler: Autoscaler | None = None  # --autoscale: desired engines per role
        if config.autoscale:
            self.autoscaler = Autoscaler(config, self.pools, session, self.headers)
            self.metrics.registry.register(self.autoscaler.collector())
        # joins and leaves at run time, and drains
        self.members = Membership(
            self.pools, self.kv, self.probe_soon, config.drain_grace_s, self.metrics
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
        """Release a lease (a leaving instance's drain then looks at it again)."""
        lease.release()

    def hold_pull(self, inst: Instance) -> Hold:
        """Keep prefill ``inst`` until a decoder pulled its KV: at most the KV lease
        (``--kv-lease``; without one, ``--decode-timeout``, the longest a decoder may
        take to start)."""
        return hold(inst, self.config.kv_lease_s or self.config.decode_timeout_s)

    async def backoff(self, stage: str, attempt: int) -> None:
        """Before retry ``attempt`` (1, 2, ...) of ``stage``: count it, then wait
        ``--retry-backoff`` doubled per retry (the one place the backoff is written)."""
        self.metrics.retries.labels(stage).inc()
        await asyncio.sleep(self.config.retry_backoff_s * 2 ** (attempt - 1))

    def describe(self, inst: Instance) -> str:
        return inst.describe(self.config.debug)

    def blame(self, inst: Instance, kind: str, tried: set[Instance] | None = None) -> None:
        """A request failed on ``inst`` (``kind``): the request does not choose it again
        (``tried``), and the failure counts against it and its failure domain. A leaving
        instance's broken stream is its drain's cut, not its failure."""
        if tried is not None:
            tried.add(inst)
        if kind == STREAM_INTERRUPTED and inst.drain is not None:
            return
        self.health.request_failed(inst, kind, self.pools[inst.role].members)

    def suspect(self, inst: Instance, reason: str) -> None:
        """``inst`` may be gone though nothing failed on it yet (a prefill whose KV a
        failed decode was to read): suspect until a probe finds it alive."""
        self.health.suspect(inst, reason)

    async def attempt(
        self,
        stage: str,
        prefix_key: bytes,
        exchange: Callable[[Instance], Awaitable[T]],
        *,
        attempts: int | None = None,
        tried: set[Instance] | None = None,
        prepare: Callable[[], Awaitable[None]] | None = None,
    ) -> T:
        """Run ``exchange`` on a chosen instance, retrying failures elsewhere.

        ``tried`` (kept by the caller across calls) holds the instances that
        already failed this request; they are not chosen again. ``prepare`` runs
        before each attempt, before the instance is chosen (a new prefill: the KV
        it hands over is consumed once); a body that outlived the KV lease is
        then tried again with new KV, and the instance is not blamed.
        """
        tried = set() if tried is None else tried
        last: ProxyError | None = None
        for n in range(self.config.max_attempts if attempts is None else attempts):
            if not await self.routable(stage, tried):
                break  # nothing left: prepare nothing (no prefill KV pinned for nobody)
            if n:
                await self.backoff(stage, n)
            if prepare is not None:
                await prepare()
            candidates = await self.routable(stage, tried)  # the last may have left meanwhile
            if not candidates:
                break
            inst = self.policies[stage].choose(candidates, prefix_key)
            try:
                result = await exchange(inst)
            except Exception as exc:  # sorted by _failed, which re-raises what is not retried
                last = self._failed(stage, inst, exc, renew=prepare is not None)
                if last.kind != LEASE_EXPIRED:
                    self.blame(inst, last.kind, tried)
                continue
            self.health.request_ok(inst)
            return result
        if last is not None:
            raise last
        raise self.none_routable(stage)

    @staticmethod
    def none_routable(stage: str) -> ProxyError:
        """The refusal when ``stage`` has no engine to take a request (503)."""
        return ProxyError("no_healthy_instance", stage, f"no healthy {stage} instance")

    async def routable(self, stage: str, tried: set[Instance] | None = None) -> list[Instance]:
        """``stage``'s routable instances but ``tried``; when there are none, what joins or
        comes back within ``--pool-wait``.

        A role's pool empties for a moment in normal operation: its only pod replaced
        (``kubectl delete pod``, a node drain), a leaving engine whose successor is not
        probed yet. Refusing then turns a planned change into client errors; waiting a
        bounded time turns it into latency. Where the only engines left are ones that
        failed this request, the wait ends once probes had time to eject them (``--eject-after``
        rounds): still routable then, they are alive and failed the request itself, which
        no new engine is coming to change. The pool is looked at every
        :data:`POOL_POLL_S`: a member becomes routable only on a probe (seconds apart),
        so a poll costs little latency and needs no hook in every place state changes.
        """
        exclude = frozenset(tried or ())
        pool = self.pools[stage]
        found = pool.routable(exclude)
        wait = self.config.pool_wait_s
        if found or wait <= 0:
            return found
        t0, outcome = time.monotonic(), "timeout"
        cfg = self.config
        settle = cfg.eject_after * cfg.health_interval_s + cfg.health_timeout_s
        while not found and (left := t0 + wait - time.monotonic()) > 0:
            await asyncio.sleep(min(POOL_POLL_S, left))
            found = pool.routable(exclude)
            if not found and pool.routable() and time.monotonic() - t0 >= settle:
                outcome = "tried"  # what failed this request still takes work: it is alive
                break
        self.metrics.pool_waits.labels(stage, "found" if found else outcome).inc()
        self.metrics.pool_wait_seconds.labels(stage).observe(time.monotonic() - t0)
        return found

    def _failed(self, stage: str, inst: Instance, exc: Exception, *, renew: bool) -> ProxyError:
        """The error a failed exchange leaves to retry after; what is not retried is raised.

        A 4xx, a timeout and a failure of another stage are the exchange's own
        business; a body that outlived the KV lease is retried (not the instance's
        fault) when ``renew``: new KV comes before each attempt.
        """
        if isinstance(exc, Answer):
            self.health.request_ok(inst)  # a 4xx: the instance is fine, the request is not
            raise exc
        if isinstance(exc, OtherStageFailed):  # not this instance's failure: never retried
            raise exc.error from None
        if isinstance(exc, ProxyError):
            if exc.kind == LEASE_EXPIRED:
                self.metrics.lease_expired.inc()
                if renew:
                    return exc
            if not exc.retryable:
                raise exc
            return exc
        if isinstance(exc, aiohttp.ConnectionTimeoutError):  # a connect timeout: try elsewhere
            return self._unreachable(stage, inst)
        if isinstance(exc, TimeoutError):
            self.blame(inst, "timeout")
            raise ProxyError("timeout", stage, f"{stage} {self.describe(inst)} timed out") from None
        if isinstance(exc, RETRYABLE):
            return self._unreachable(stage, inst)
        raise exc

    def _unreachable(self, stage: str, inst: Instance) -> ProxyError:
        return ProxyError("connect_failed", stage, f"could not reach {stage} {self.describe(inst)}")


def kv_routing(config: ProxyConfig, session: aiohttp.ClientSession) -> KvRouting | None:
    """The shared state of the ``kv-events`` policy, when a stage uses it (pyzmq imported here)."""
    if KV_POLICY not in (config.prefill_policy, config.decode_policy):
        return None
    from servekit.proxy.kvaware import KvRouting

    return KvRouting(config, session)
