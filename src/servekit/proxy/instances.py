"""Backend instances and their pools: health state and outstanding work.

Each instance carries the load the scheduler reads (outstanding tokens and
requests) and the state the health checker writes. Load is only ever changed
through a :class:`Lease`, whose ``release`` is idempotent and called from a
``finally``: accounting cannot leak on any exit path (error, retry, client
disconnect).

An instance may name its failure domain (``--failure-domains``): the engine
whose DP rank it is and the node it runs on. Processes of one engine, and of
one node, fail together, so after one of them fails its siblings are
*suspect* (the health checker's rule): the pools offer them only when nothing
else is left, until a probe sent after the failure shows each alive. Work in
flight on an instance the checker finds gone is cut (:meth:`Instance.cut`), so
a stream on a node that went silent is carried on at once rather than after
``--stream-idle-timeout``.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


class State(enum.Enum):
    """Where an instance stands; only HEALTHY instances take new work."""

    UNKNOWN = "unknown"  # not probed yet
    HEALTHY = "healthy"
    EJECTED = "ejected"  # failed probes, or an outlier on requests; probes re-admit it
    DRAINING = "draining"  # admin asked: no new work, in-flight work completes


@dataclass(eq=False)
class Instance:
    """One backend API server (a prefill, decode or replica endpoint)."""

    name: str
    role: str
    url: str
    state: State = State.UNKNOWN
    tokens: int = 0
    requests: int = 0
    fails: int = 0
    oks: int = 0
    remove_when_idle: bool = False
    served: int = 0
    request_fails: int = 0  # consecutive failed requests (5xx, empty 200, connection errors)
    ejections: int = 0  # outlier ejections since the last good request
    ejected_until: float = 0.0  # probes may not re-admit an outlier before this (monotonic)
    engine: str | None = None  # the engine whose DP rank this is (--failure-domains)
    node: str | None = None  # the node it runs on
    suspect_since: float | None = None  # a sibling (or itself) failed then (monotonic)
    probed_alive_at: float = float("-inf")  # a round after its failure found it alive
    max_model_len: int | None = None  # its model's length, from /v1/models (decoders)
    _cuts: set[Callable[[], None]] = field(default_factory=set, repr=False)

    @property
    def routable(self) -> bool:
        return self.state is State.HEALTHY

    def siblings(self, other: Instance) -> bool:
        """``other`` shares this instance's engine or node (itself included)."""
        if other is self:
            return True
        same_engine = self.engine is not None and other.engine == self.engine
        return same_engine or (self.node is not None and other.node == self.node)

    @contextlib.contextmanager
    def cuttable(self, cut: Callable[[], None]) -> Iterator[None]:
        """Work in flight here that :meth:`cut` ends (``cut`` closes or times it out)."""
        self._cuts.add(cut)
        try:
            yield
        finally:
            self._cuts.discard(cut)

    def cut(self) -> int:
        """End every exchange in flight here (the instance is gone); how many there were."""
        cuts, self._cuts = self._cuts, set()
        for cut in cuts:
            cut()
        return len(cuts)

    def describe(self, show_url: bool) -> str:
        """How errors name this instance: the URL only in --debug."""
        return f"{self.name} ({self.url})" if show_url else self.name

    def snapshot(self) -> dict[str, object]:
        return {
            "name": self.name,
            "role": self.role,
            "url": self.url,
            "state": self.state.value,
            "outstanding_tokens": self.tokens,
            "outstanding_requests": self.requests,
            "served": self.served,
            "engine": self.engine,
            "node": self.node,
            "suspect": self.suspect_since is not None,
        }


@dataclass(eq=False)
class Lease:
    """Work placed on an instance; grows as tokens stream, released exactly once."""

    instance: Instance
    tokens: int
    released: bool = False

    def grow(self, tokens: int) -> None:
        if not self.released and tokens:
            self.tokens += tokens
            self.instance.tokens += tokens

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        inst = self.instance
        inst.tokens -= self.tokens
        inst.requests -= 1
        inst.served += 1


@dataclass
class Pool:
    """The instances of one role, in insertion order."""

    role: str
    members: list[Instance] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=itertools.count)

    def add(self, url: str) -> Instance:
        """Add an instance (idempotent by URL); a draining one is taken back."""
        for inst in self.members:
            if inst.url == url:
                inst.remove_when_idle = False
                if inst.state is State.DRAINING:
                    inst.state = State.UNKNOWN
                return inst
        inst = Instance(name=f"{self.role}-{next(self._ids)}", role=self.role, url=url)
        self.members.append(inst)
        return inst

    def find(self, url: str) -> Instance | None:
        return next((i for i in self.members if i.url == url), None)

    def routable(self, exclude: frozenset[Instance] = frozenset()) -> list[Instance]:
        """The healthy members not in ``exclude``: the unsuspected ones, or, when every
        one left is suspect, those (never an empty pool for a suspicion alone)."""
        found = [i for i in self.members if i.routable and i not in exclude]
        clear = [i for i in found if i.suspect_since is None]
        return clear if clear or not found else found

    def healthy_count(self) -> int:
        return sum(1 for i in self.members if i.routable)

    def reap(self) -> None:
        """Drop drained instances whose in-flight work has completed."""
        self.members = [i for i in self.members if not (i.remove_when_idle and i.requests == 0)]


def acquire(instance: Instance, tokens: int) -> Lease:
    """Place ``tokens`` of work on ``instance``; pair with ``Lease.release``."""
    instance.tokens += tokens
    instance.requests += 1
    return Lease(instance, tokens)
