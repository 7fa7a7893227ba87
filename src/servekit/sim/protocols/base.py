"""What every handoff protocol's handler is in the simulator, and what they share.

A handler decides what an endpoint of its protocol does with a request's
``kv_transfer_params``: on a decoder, whether the prompt's KV comes from a
prefill (:meth:`Handler.receive`); on a prefill, what happens to the KV when
the sequence finishes (:meth:`Handler.finish`, or up front: :meth:`Handler.begin`).
What they share is written once here: the transfer time and counters of
handed-over KV, and the unguarded decoder's incident on a plain request.
Handlers see the endpoint as :class:`Endpoint` (a protocol), so they do not
import ``sim.endpoint``, which imports them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from servekit.guard import MetaserverKey
from servekit.sim.clock import Clock
from servekit.sim.engine import Engine, Seq
from servekit.sim.faults import FaultSpec
from servekit.sim.kvcache import KvCache
from servekit.sim.metrics import EngineStats
from servekit.sim.openai import ApiError, GenRequest
from servekit.sim.pd import KvRegistry, KvSourceLost, KvTransferError, Producer
from servekit.sim.profile import Profile
from servekit.sim.spec import EndpointSpec
from servekit.vocabulary import KvProtocol

OnFinish = Callable[[Seq], bool]  # a finished sequence's KV: True while it is held for a decoder


@dataclass(slots=True)
class Admitted:
    """A request accepted by the engine, and what its response needs."""

    seq: Seq
    request: GenRequest
    request_id: str
    kv_params: dict[str, Any] | None = None
    usage_skew: int = 0


class Endpoint(Protocol):
    """What of an endpoint (``sim.endpoint.SimEndpoint``) a handler reads and does."""

    spec: EndpointSpec
    profile: Profile
    faults: FaultSpec
    kv: KvCache
    kvreg: KvRegistry
    engine: Engine
    stats: EngineStats
    log: logging.Logger
    producer: Producer | None
    dead: bool
    worker_addr: str | None  # bootstrap mode across processes: its KV side channel

    clock: Clock

    @property
    def any_peer(self) -> bool: ...

    def kill(self, reason: str) -> None: ...

    def incident(self, rid: str, prompt_len: int) -> None: ...


def handed(ep: Endpoint, prompt_len: int) -> float | None:
    """The prompt's KV came from a prefill: counted, and its transfer time (None: recomputed)."""
    if ep.faults.no_kv_handoff:
        return None  # the KV was there; this decoder computes the prompt again
    ep.stats.external_queries += prompt_len
    ep.stats.external_hits += prompt_len
    return ep.profile.transfer_time(prompt_len)


def plain(ep: Endpoint, rid: str, prompt_len: int) -> None:
    """A decoder asked to prefill by itself: the unguarded one dies like the seed's."""
    if ep.spec.unguarded_incident and prompt_len > 0:
        ep.incident(rid, prompt_len)


def claim(ep: Endpoint, req: GenRequest, rid: str, digest: int, prompt_len: int) -> float | None:
    """Take the KV that params asking for a remote prefill name (pull or bootstrap shape)."""
    params = req.kv_transfer_params or {}
    try:
        offer = ep.kvreg.claim(params, digest, ep.clock.now(), trust_remote=ep.any_peer)
    except KvSourceLost as exc:  # vLLM's kv_load_failure_policy "fail": an internal error
        ep.log.error("KV load failed for %s: %s", rid, exc)
        raise ApiError(
            500, "Internal server error (KV load failed)", "InternalServerError"
        ) from exc
    except KvTransferError as exc:
        ep.log.error("KV transfer failed for %s: %s", rid, exc)
        raise ApiError(400, f"kv_transfer_params: {exc}", "KVTransferError") from exc
    if offer is not None:  # the pull runs while the decoder waits its transfer time
        ep.kvreg.pulling[(ep.spec.name, rid)] = offer.producer
    return handed(ep, prompt_len)


class Handler:
    """One protocol's side of an endpoint (its row of servekit.kvprotocol.HANDOFFS)."""

    protocol: ClassVar[KvProtocol]

    async def receive(
        self, ep: Endpoint, req: GenRequest, rid: str, digest: int, prompt_len: int
    ) -> float | None:
        """Decode side: the KV transfer time when the prompt's KV comes from a prefill."""
        if (req.kv_transfer_params or {}).get("do_remote_prefill"):
            return claim(ep, req, rid, digest, prompt_len)
        plain(ep, rid, prompt_len)
        return None

    def begin(self, ep: Endpoint, req: GenRequest) -> OnFinish | None:
        """Prefill side, at admission: the sequence's end when decided now (None: at finish)."""
        return None

    def finish(self, ep: Endpoint, admitted: Admitted, digest: int) -> OnFinish | None:
        """Prefill side: what happens to a finished sequence's KV (held for a decoder?)."""
        return None

    def guard_keys(self, ep: Endpoint) -> frozenset[MetaserverKey] | None:
        """The metaservers the decode guard trusts here (none but layerwise's)."""
        return None
