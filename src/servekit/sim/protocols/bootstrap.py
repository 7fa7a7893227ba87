"""The bootstrap protocol (vLLM's MooncakeConnector): KV held under the proxy's transfer id.

The prefill holds its blocks under the ``transfer_id`` the proxy sent and
answers no params (its producer is a bootstrap server); a decoder names the id,
the engine and that server (servekit.sim.pd.KvRegistry.claim).
"""

from __future__ import annotations

from typing import Any, ClassVar

from servekit.sim.protocols.base import Endpoint
from servekit.sim.protocols.pull import Pull
from servekit.vocabulary import KvProtocol


class Bootstrap(Pull):
    protocol: ClassVar[KvProtocol] = "bootstrap"

    def ready(self, ep: Endpoint, params: dict[str, Any]) -> bool:
        if not params.get("transfer_id"):
            ep.log.warning("Missing transfer_id in kv_transfer_params from router!")
            return False
        return True
