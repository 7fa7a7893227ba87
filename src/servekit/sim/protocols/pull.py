"""The pull protocol: the prefill holds its blocks and answers params naming them.

A prefill-role endpoint that finishes a request with ``do_remote_decode`` keeps
its blocks and offers them under ``kv_transfer_params`` in the shape its
connector answers (servekit.sim.pd.pull_params); a decoder given them claims
them once (the shared :func:`~servekit.sim.protocols.base.claim`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from servekit.sim.engine import Seq
from servekit.sim.pd import Producer
from servekit.sim.protocols.base import Admitted, Endpoint, Handler, OnFinish
from servekit.vocabulary import KvProtocol


class Pull(Handler):
    protocol: ClassVar[KvProtocol] = "params"

    def finish(self, ep: Endpoint, admitted: Admitted, digest: int) -> OnFinish | None:
        params = admitted.request.kv_transfer_params or {}
        producer = ep.producer
        if producer is None or not params.get("do_remote_decode") or not self.ready(ep, params):
            return None
        return _hold(ep, producer, admitted, digest, params)

    def ready(self, ep: Endpoint, params: dict[str, Any]) -> bool:
        """Whether the params let the prefill offer its KV."""
        return True


def _hold(
    ep: Endpoint, producer: Producer, admitted: Admitted, digest: int, params: dict[str, Any]
) -> OnFinish:
    def hold(seq: Seq) -> bool:
        alloc = seq.alloc
        held = not ep.any_peer  # a decoder in another process pulls at once

        def release() -> None:
            if held and alloc is not None and not ep.dead:
                ep.kv.free(alloc)
                ep.engine.wake()

        admitted.kv_params = ep.kvreg.offer(
            producer,
            request_id=admitted.request_id,
            prompt=(digest, seq.prompt_len),
            n_blocks=ep.kv.blocks_for(seq.prompt_len),
            window=(ep.engine.vt, ep.profile.kv_hold_timeout_s),
            release=release,
            transfer_id=params.get("transfer_id"),
        )
        return held

    return hold
