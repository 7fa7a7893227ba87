"""Which engines serve, learned at run time: the one place they join and leave.

Engines come from the flags at start, from the admin API (``/admin/instances``)
and from discovery (:mod:`servekit.proxy.discovery`, on Kubernetes); every one of
them joins and leaves through :class:`Membership`, so the rules hold whatever
the source:

- an engine joins in state ``UNKNOWN`` and takes work only once its own
  ``/health`` answered 200 (probed at once, then every round);
- what joins with a KV-event publisher is subscribed to (the kv-events policy
  scores it from its events); what leaves is unsubscribed, and what the proxy
  knew of its cache is dropped;
- an engine that leaves stops getting new requests at once and is drained
  (:mod:`servekit.proxy.drain`): a removal leaves the pool once drained.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from servekit.errors import UsageError
from servekit.proxy.drain import Drain, Drainer
from servekit.proxy.instances import Instance, Pool, State
from servekit.proxy.metrics import ProxyMetrics

ENDPOINT_SCHEMES = ("tcp://", "ipc://")


@dataclass(frozen=True)
class Publisher:
    """An engine's KV-event publisher (vLLM's ``--kv-events-config``) and replay socket."""

    endpoint: str
    replay: str | None = None

    @classmethod
    def parse(cls, text: str, field: str) -> Publisher:
        """``tcp://HOST:PORT[,tcp://HOST:REPLAY_PORT]``; UsageError naming ``field``."""
        ends = text.split(",")
        if len(ends) > 2 or not all(e.startswith(ENDPOINT_SCHEMES) and len(e) > 6 for e in ends):
            raise UsageError(f"{field}: {text[:200]!r}: expected tcp://HOST:PORT[,tcp://HOST:PORT]")
        return cls(ends[0], ends[1] if len(ends) == 2 else None)


@dataclass(frozen=True)
class Member:
    """One engine endpoint as a source of membership names it."""

    role: str
    url: str
    publisher: Publisher | None = None
    bootstrap: tuple[str, str] | None = None  # bootstrap mode: (engine id, bootstrap URL)
    pod: str | None = None  # discovery: the pod that serves it


class Subscriptions(Protocol):
    """The kv-events policy's subscriptions (:class:`servekit.proxy.kvaware.KvRouting`)."""

    def subscribe(self, url: str, endpoint: str, replay: str | None) -> None: ...

    def unsubscribe(self, url: str) -> None: ...


class Membership:
    """Joins and leaves of one proxy's pools (flags, admin API, discovery)."""

    def __init__(
        self, pools: dict[str, Pool], kv: Subscriptions | None,
        probe: Callable[[Instance], None], grace_s: float, metrics: ProxyMetrics,
    ) -> None:  # fmt: skip
        self.pools = pools
        self.kv = kv
        self.probe = probe  # probe it now rather than at the next round
        self.drainer = Drainer(grace_s, metrics, self._elsewhere, self._left)

    def instances(self) -> Iterator[Instance]:
        for pool in self.pools.values():
            yield from pool.members

    def join(self, member: Member, origin: str) -> Instance:
        """Add (or take back) an engine; it takes work once its probe answers 200."""
        pool = self.pools[member.role]
        known = pool.find(member.url)
        if known is not None and known.drain is not None:
            self.drainer.cancel(known)
        inst = pool.add(member.url)
        if known is None:
            inst.origin = origin
        if member.bootstrap is not None:
            inst.bootstrap = member.bootstrap
        if member.pod is not None:
            inst.pod = member.pod
        if member.publisher is not None and self.kv is not None:
            self.kv.subscribe(member.url, member.publisher.endpoint, member.publisher.replay)
        self.probe(inst)
        return inst

    def leave(self, inst: Instance, reason: str) -> Drain:
        """The engine goes: no new work from now on, drained, then out of the pool."""
        return self.drainer.start(inst, reason, remove=True)

    def drain(self, inst: Instance, reason: str) -> Drain:
        """No new work; drained, and kept until undrained (or removed)."""
        return self.drainer.start(inst, reason, remove=False)

    def undrain(self, inst: Instance) -> None:
        """Take a drained (or draining) engine back; its probe re-admits it."""
        self.drainer.cancel(inst)
        self.probe(inst)

    def find(self, url: str, role: str | None = None) -> Instance | None:
        return next((i for i in self.instances() if i.url == url and role in (None, i.role)), None)

    def _elsewhere(self, inst: Instance) -> bool:
        """Another engine of ``inst``'s role takes work (a stream cut here has somewhere to go)."""
        peers = self.pools[inst.role].members
        return any(p is not inst and p.state is State.HEALTHY for p in peers)

    def _left(self, inst: Instance) -> None:
        self.pools[inst.role].discard(inst)
        if self.kv is not None and not any(i.url == inst.url for i in self.instances()):
            self.kv.unsubscribe(inst.url)
