"""The prompt-keyed protocol (vLLM's ExampleConnector): KV saved under the prompt.

A prefill saves the KV of every prompt it computes; a decoder finds it by a
digest of the prompt and needs no params (engines in other processes: the
proxy's marker stands for the saved KV).
"""

from __future__ import annotations

from servekit.sim.engine import Seq
from servekit.sim.openai import GenRequest
from servekit.sim.protocols.base import Admitted, Endpoint, Handler, OnFinish, handed


class PromptKeyed(Handler):
    protocol = "prompt"

    async def receive(
        self, ep: Endpoint, req: GenRequest, rid: str, digest: int, prompt_len: int
    ) -> float | None:
        params = req.kv_transfer_params or {}
        if not params.get("do_remote_prefill") and (
            ep.kvreg.lookup_prompt(digest) or (ep.any_peer and bool(params))
        ):
            ep.log.info("External Cache Hit! request %s", rid)
            return handed(ep, prompt_len)
        return await super().receive(ep, req, rid, digest, prompt_len)

    def finish(self, ep: Endpoint, admitted: Admitted, digest: int) -> OnFinish | None:
        if ep.producer is None:
            return None

        def store(seq: Seq) -> bool:
            ep.kvreg.store_prompt(digest, seq.prompt_len)
            return False

        return store
