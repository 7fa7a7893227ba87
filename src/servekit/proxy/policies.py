"""Scheduling policies: pick one instance among the routable ones.

Prefill and decode each get their own policy (``--prefill-policy``,
``--decode-policy``). Load is outstanding work in tokens, so one 100k-token
prompt weighs what it costs, not what its JSON weighs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from servekit.proxy.config import KV_POLICY, ProxyConfig
from servekit.proxy.instances import Instance, rendezvous

if TYPE_CHECKING:
    import aiohttp

    from servekit.proxy.kvaware import KvRouting


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


def make_policy(name: str, kv: KvRouting | None = None, stage: str = "") -> Policy:
    """A fresh policy object by its flag name (``kv-events`` needs the shared ``kv``)."""
    if name == "kv-events" and kv is not None:
        return kv.policy(stage)
    if name == "round-robin":
        return RoundRobin()
    if name == "prefix-affinity":
        return PrefixAffinity()
    return LeastLoaded()


def kv_routing(config: ProxyConfig, session: aiohttp.ClientSession) -> KvRouting | None:
    """The shared state of the ``kv-events`` policy, when a stage uses it (pyzmq imported here)."""
    if KV_POLICY not in (config.prefill_policy, config.decode_policy):
        return None
    from servekit.proxy.kvaware import KvRouting

    return KvRouting(config, session)
