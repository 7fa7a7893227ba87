"""Backend instances and their pools: health state and outstanding work.

Each instance carries the load the scheduler reads (outstanding tokens and
requests) and the state the health checker writes. Load is only ever changed
through a :class:`Lease`, whose ``release`` is idempotent and called from a
``finally``: accounting cannot leak on any exit path (error, retry, client
disconnect).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterator
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

    @property
    def routable(self) -> bool:
        return self.state is State.HEALTHY

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
        return [i for i in self.members if i.routable and i not in exclude]

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
