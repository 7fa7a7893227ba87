"""The bootstrap protocol (vLLM's MooncakeConnector): the proxy names the transfer.

The proxy makes a transfer id per attempt and tells the prefill to hold the KV
under it (``{do_remote_decode, transfer_id}``); the prefill answers no params,
and the decode request carries the id with the chosen prefill's engine id and
bootstrap server (``--prefill-bootstrap``); only a prefill without a known
bootstrap server is a 502.
"""

from __future__ import annotations

import uuid
from typing import Any

from servekit.proxy.failures import ProxyError
from servekit.proxy.payloads import (
    bootstrap_decode_params,
    bootstrap_prefill_params,
    decode_payload,
)
from servekit.proxy.protocols.base import Handler
from servekit.proxy.stages import Stages


class Bootstrap(Handler):
    protocol = "bootstrap"
    one_prompt = True

    async def handoff(self, stages: Stages, body: dict[str, Any]) -> dict[str, Any]:
        transfer_id = uuid.uuid4().hex
        await stages.prefill(with_kv_params=True, kv_params=bootstrap_prefill_params(transfer_id))
        inst = stages.prefilled_on
        server = inst.bootstrap if inst is not None else None  # flags, admin or discovery
        if server is None:
            who = "?" if inst is None else stages.router.describe(inst)
            msg = f"prefill {who} has no known bootstrap server (--prefill-bootstrap)"
            raise ProxyError("missing_kv_transfer_params", "prefill", msg)
        return decode_payload(body, bootstrap_decode_params(transfer_id, *server))
