"""The prompt-keyed protocol (ExampleConnector): the decoder finds the KV by the prompt.

The prefill copy carries no kv_transfer_params; the decode request is the
client's with exactly servekit's marker as ``kv_transfer_params`` (the client's
own replaced), which only prompt-keyed decoders' guards accept. The KV is not
consumed by a decoder, so a decode retry needs no new prefill.
"""

from __future__ import annotations

from typing import Any

from servekit.proxy.payloads import prompt_keyed_decode_payload
from servekit.proxy.protocols.base import Handler
from servekit.proxy.stages import Stages


class PromptKeyed(Handler):
    protocol = "prompt"
    fresh_kv = False

    async def handoff(self, stages: Stages, body: dict[str, Any]) -> dict[str, Any]:
        await stages.prefill(with_kv_params=False)
        return prompt_keyed_decode_payload(body)
