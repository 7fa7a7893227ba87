"""The KV lease: a prefill holds its KV for a decoder only so long.

A pull connector frees (or hands to another request) the blocks a prefill kept
for its decoder when the decoder has not pulled them within the connector's
abort timeout (NIXL: ``VLLM_NIXL_ABORT_REQUEST_TIMEOUT``, vLLM's MooncakeConnector:
``VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT``, 480 s each in vLLM 0.32). A decoder
handed older params pulls blocks that may hold another prompt's KV and answers
200 with that prompt's continuation. The Plan gives the proxy the lease
(``--kv-lease``); the proxy notes when the prefill answered and checks the age
of the params at the last moment it can: when the decode request's body is
about to be written, after the connection to the decoder is made. A body past
``lease - margin`` is not written (the decoder gets no params, only a closed
connection), and the proxy runs a new prefill.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import BytesPayload

MARGIN_S = 10.0  # at most this, and at most a tenth of the lease


class LeaseExpired(Exception):
    """The decode params outlived the prefill's KV lease; nothing was sent."""


def margin(lease_s: float) -> float:
    """What is kept back from the lease: transit both ways and the decoder's own start."""
    return min(MARGIN_S, lease_s / 10)


class LeasedBody(BytesPayload):
    """A decode body that refuses to be written once its KV lease is past."""

    def __init__(self, data: bytes, deadline: float, **kwargs: Any) -> None:
        super().__init__(data, content_type="application/json", **kwargs)
        self.deadline = deadline
        self.stale = False

    def check(self) -> None:
        if time.monotonic() > self.deadline:
            self.stale = True
            raise LeaseExpired("the prefill's KV lease passed before the decode was sent")

    async def write(self, writer: AbstractStreamWriter) -> None:
        self.check()
        await super().write(writer)

    async def write_with_length(
        self, writer: AbstractStreamWriter, content_length: int | None
    ) -> None:
        self.check()
        await super().write_with_length(writer, content_length)
