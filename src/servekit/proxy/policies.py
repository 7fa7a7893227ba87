"""Scheduling policies: pick one instance among the routable ones.

Prefill and decode each get their own policy (``--prefill-policy``,
``--decode-policy``), chosen by name from one table (:data:`POLICIES`), whose
names are the options' choices: an unknown name is refused at the option, and
:func:`make_policy` refuses one too. Load is outstanding work in tokens, so one
100k-token prompt weighs what it costs, not what its JSON weighs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from servekit.proxy.instances import Instance, rendezvous

KV_POLICY = "kv-events"


class Policy(Protocol):
    """Chooses an instance; ``candidates`` is never empty."""

    def choose(self, candidates: Sequence[Instance], prefix_key: bytes) -> Instance: ...


class LeastLoaded:
    """Fewest outstanding tokens, then fewest requests; ties go by prefix affinity.

    Breaking ties by rendezvous hash of the prompt prefix (rather than spreading
    them) sends a repeated prompt to the instance that already holds its KV when
    the instances are equally idle, so prefix caching works behind a DP fan-out
    without giving up least-loaded balancing under load.
    """

    def choose(self, candidates: Sequence[Instance], prefix_key: bytes) -> Instance:
        return min(
            candidates,
            key=lambda i: (i.tokens, i.requests, _inverse_score(prefix_key, i)),
        )


class RoundRobin:
    """Each instance in turn, whatever its load."""

    def __init__(self) -> None:
        self._next = 0

    def choose(self, candidates: Sequence[Instance], prefix_key: bytes) -> Instance:
        inst = candidates[self._next % len(candidates)]
        self._next += 1
        return inst


def _inverse_score(prefix_key: bytes, inst: Instance) -> bytes:
    """Orders like :func:`rendezvous` reversed, so ``min`` picks the rendezvous winner."""
    return bytes(255 - b for b in rendezvous(prefix_key, inst))


class PrefixAffinity:
    """Same prompt prefix -> same instance (rendezvous hashing), for cache hits.

    Rendezvous hashing keeps most prefixes on their instance when one joins or
    leaves. A bound keeps one hot prefix from burying an instance: when the
    chosen instance carries more than ``overload`` times the least loaded one's
    tokens (plus ``slack``), the least loaded instance takes the request.
    """

    def __init__(self, overload: float = 2.0, slack: int = 8192) -> None:
        self.overload = overload
        self.slack = slack

    def choose(self, candidates: Sequence[Instance], prefix_key: bytes) -> Instance:
        chosen = max(candidates, key=lambda i: rendezvous(prefix_key, i))
        lightest = LeastLoaded().choose(candidates, prefix_key)
        if chosen.tokens > self.overload * lightest.tokens + self.slack:
            return lightest
        return chosen


class KvPolicies(Protocol):
    """What routes by the engines' cached blocks (:class:`servekit.proxy.kvaware.KvRouting`):
    one policy per stage over the indexes they share."""

    def policy(self, stage: str) -> Policy: ...


def _kv_events(kv: KvPolicies | None, stage: str) -> Policy:
    if kv is None:
        raise ValueError(f"the {KV_POLICY} policy needs the engines' KV events (--kv-events)")
    return kv.policy(stage)


# name -> a fresh policy for a stage (``kv-events`` draws on the shared indexes)
POLICIES: dict[str, Callable[[KvPolicies | None, str], Policy]] = {
    "least-loaded": lambda kv, stage: LeastLoaded(),
    "round-robin": lambda kv, stage: RoundRobin(),
    "prefix-affinity": lambda kv, stage: PrefixAffinity(),
    KV_POLICY: _kv_events,
}
POLICY_NAMES = tuple(POLICIES)


def make_policy(name: str, kv: KvPolicies | None = None, stage: str = "") -> Policy:
    """A fresh policy by its option name; an unknown name is a one-line ValueError."""
    make = POLICIES.get(name)
    if make is None:
        raise ValueError(f"unknown policy {name!r}: pick one of {', '.join(POLICY_NAMES)}")
    return make(kv, stage)
