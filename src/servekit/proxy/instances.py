"""Backend instances and their pools: health state and outstanding work.

Each instance carries the load the scheduler reads (outstanding tokens and
requests) and the state the health checker writes. Load is only ever changed
through a :class:`Lease`, whose ``release`` is idempotent and called from a
``finally``: accounting cannot leak on any exit path (error, retry, client
disconnect).

What an engine that leaves must wait for is here too (:mod:`servekit.proxy.drain`
decides when): its live leases (a migrating stream's lease says how to cut it, so
the stream carries on elsewhere) and its :class:`Hold` s, prefilled KV that a
decoder has not pulled yet (the prefill must stay up until it has). A
:class:`LoadObserver` (the autoscaler's sampler) sees every lease start and end.

An instance may name its failure domain (``--failure-domains``): the engine
whose DP rank it is and the node it runs on. Processes of one engine, and of
one node, fail together, so after one of them fails its siblings are
*suspect* (the health checker's rule): the pools offer them only when nothing
else is left, until a probe sent after the failure shows each alive. Work in
flight on an instance the checker finds gone is cut (:meth:`Instance.cut`: the
exchanges waiting for an answer, the streams, migrating ones by their lease's
cut), so a stream on a node that went silent is carried on at once rather than
after ``--stream-idle-timeout``.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol


def rendezvous(key: bytes, inst: Instance) -> bytes:
    """``inst``'s rendezvous (highest-random-weight) hash for ``key``.

    One key ranks the instances the same way wherever it is asked (a policy's
    choice, a tie broken between equal costs), and most keys keep their instance
    when another joins or leaves.
    """
    return hashlib.blake2b(key + inst.url.encode(), digest_size=8).digest()


class State(enum.Enum):
    """Where an instance stands; only HEALTHY instances take new work."""

    UNKNOWN = "unknown"  # not probed yet
    HEALTHY = "healthy"
    EJECTED = "ejected"  # failed probes, or an outlier on requests; probes re-admit it
    DRAINING = "draining"  # leaving (admin, discovery, preStop): no new work, in-flight ends


class Leaving(Protocol):
    """An instance's drain, as its work sees it (:class:`servekit.proxy.drain.Drain`)."""

    @property
    def cutting(self) -> bool:
        """Past the grace: a stream that can migrate is cut at once."""

    def wake(self) -> None:
        """Work on the instance ended or a hold was released."""

    def cut(self, lease: Lease) -> None:
        """End ``lease``'s stream here so that it carries on elsewhere."""


class LoadObserver(Protocol):
    """Sees the work placed on instances (the autoscaler's measurements)."""

    def started(self, lease: Lease, now: float) -> None: ...

    def ended(self, lease: Lease, now: float) -> None: ...


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
    served: int = 0
    request_fails: int = 0  # consecutive failed requests (5xx, empty 200, connection errors)
    ejections: int = 0  # outlier ejections since the last good request
    ejected_until: float = 0.0  # probes may not re-admit an outlier before this (monotonic)
    origin: str = "static"  # who added it: static (flags), admin, discovery
    pod: str | None = None  # discovery: the pod serving it (a preStop call names it)
    bootstrap: tuple[str, str] | None = None  # bootstrap mode: (engine id, bootstrap server URL)
    leases: set[Lease] = field(default_factory=set)  # the work in flight on it
    holds: set[Hold] = field(default_factory=set)  # its prefilled KV not pulled yet
    drain: Leaving | None = None  # set while it leaves
    observer: LoadObserver | None = None
    engine: str | None = None  # the engine whose DP rank this is (--failure-domains)
    node: str | None = None  # the node it runs on
    suspect_since: float | None = None  # a sibling (or itself) failed then (monotonic)
    probed_alive_at: float = float("-inf")  # a round after its failure found it alive
    max_model_len: int | None = None  # its model's length, from /v1/models (decoders)
    _cuts: set[Callable[[], None]] = field(default_factory=set, repr=False)

    @property
    def routable(self) -> bool:
        return self.state is State.HEALTHY

    def pending_pulls(self, now: float | None = None) -> int:
        """Holds whose KV a decoder may still pull (their deadline not passed)."""
        at = time.monotonic() if now is None else now
        return sum(1 for h in self.holds if h.deadline > at)

    def idle(self) -> bool:
        """Nothing in flight and no KV waiting for a decoder: it may go."""
        return self.requests <= 0 and not self.pending_pulls()

    def changed(self) -> None:
        """Its work ended or a hold was released: a drain waiting on it looks again."""
        if self.drain is not None:
            self.drain.wake()

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
        """End every exchange and stream in flight here (the instance is gone): a
        migrating stream by its lease's cut, so that it carries on elsewhere; how many."""
        cuts, self._cuts = self._cuts, set()
        cuts |= {lease.cut for lease in self.leases if lease.cut is not None and not lease.released}
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
            "origin": self.origin,
            "pod": self.pod,
            "pending_pulls": self.pending_pulls(),
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
    prompt_tokens: int = 0  # the tokens it was placed with
    started: float = 0.0  # monotonic
    first_at: float | None = None  # when its first streamed event came
    events: int = 0  # streamed events relayed
    cut: Callable[[], None] | None = None  # ends its stream so the stream migrates

    def grow(self, tokens: int) -> None:
        if not self.released and tokens:
            if self.first_at is None:
                self.first_at = time.monotonic()
            self.events += tokens
            self.tokens += tokens
            self.instance.tokens += tokens

    def cuttable(self, cut: Callable[[], None]) -> None:
        """Its stream can migrate: ``cut`` ends it here (now, if its instance's grace passed)."""
        self.cut = cut
        drain = self.instance.drain
        if drain is not None and drain.cutting and not self.released:
            drain.cut(self)

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        inst = self.instance
        inst.tokens -= self.tokens
        inst.requests -= 1
        inst.served += 1
        inst.leases.discard(self)
        if inst.observer is not None:
            inst.observer.ended(self, time.monotonic())
        inst.changed()


@dataclass(eq=False)
class Hold:
    """A prefill's KV held for a decoder that has not pulled it yet.

    Released when the decode leg's first byte came (the decoder pulled the KV
    before its first token), failed or ended; past ``deadline`` (the KV lease,
    after which the prefill frees the blocks anyway) it no longer counts.
    """

    instance: Instance
    deadline: float
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.instance.holds.discard(self)
            self.instance.changed()


def hold(instance: Instance, for_s: float) -> Hold:
    """Keep ``instance`` (a prefill) until a decoder pulled its KV, at most ``for_s``."""
    found = Hold(instance, time.monotonic() + for_s)
    instance.holds.add(found)
    return found


@dataclass
class Pool:
    """The instances of one role, in insertion order."""

    role: str
    members: list[Instance] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=itertools.count)
    observer: LoadObserver | None = None

    def add(self, url: str) -> Instance:
        """Add an instance (idempotent by URL); a draining one is taken back."""
        for inst in self.members:
            if inst.url == url:
                if inst.state is State.DRAINING:
                    inst.state = State.UNKNOWN
                return inst
        inst = Instance(name=f"{self.role}-{next(self._ids)}", role=self.role, url=url)
        inst.observer = self.observer
        self.members.append(inst)
        return inst

    def discard(self, inst: Instance) -> None:
        """Drop ``inst`` from the pool (it left)."""
        self.members = [i for i in self.members if i is not inst]

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


def acquire(instance: Instance, tokens: int) -> Lease:
    """Place ``tokens`` of work on ``instance``; pair with ``Lease.release``."""
    instance.tokens += tokens
    instance.requests += 1
    now = time.monotonic()
    lease = Lease(instance, tokens, prompt_tokens=tokens, started=now)
    instance.leases.add(lease)
    if instance.observer is not None:
        instance.observer.started(lease, now)
    return lease
