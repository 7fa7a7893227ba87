"""The pull protocol (proxy mode ``pd``): the decoder pulls the KV the prefill's params name.

The prefill copy announces a remote decode (:data:`PREFILL_KV_PARAMS`: NIXL,
Mooncake and vllm-ascend's Mooncake connectors all read these keys) and answers
``kv_transfer_params`` naming its blocks and side channel; the decode request is
the client's request with those params, forwarded only when they ask for a
remote prefill as the decode guard requires (the proxy half of the guard).
"""

from __future__ import annotations

from typing import Any

from servekit.proxy.failures import ProxyError
from servekit.proxy.payloads import decode_payload
from servekit.proxy.protocols.base import Handler
from servekit.proxy.stages import Stages


class Pull(Handler):
    protocol = "params"
    one_prompt = True

    async def handoff(self, stages: Stages, body: dict[str, Any]) -> dict[str, Any]:
        kv = await stages.prefill(with_kv_params=True)
        if kv is None:
            msg = (
                "prefill answer carried no kv_transfer_params asking for a remote prefill; "
                "is the KV connector configured?"
            )
            raise ProxyError("missing_kv_transfer_params", "prefill", msg)
        return decode_payload(body, kv)
