"""One handler per KV handoff protocol in the simulator, chosen from servekit.kvprotocol.

``pull``, ``bootstrap``, ``prompt_keyed`` and ``layerwise``: each module says
what an endpoint of its protocol does with ``kv_transfer_params``; the transfer
layer they share is servekit.sim.pd, the rest the endpoint's.
"""

from __future__ import annotations

from servekit.sim.protocols.base import Handler
from servekit.sim.protocols.bootstrap import Bootstrap
from servekit.sim.protocols.layerwise import Layerwise
from servekit.sim.protocols.prompt_keyed import PromptKeyed
from servekit.sim.protocols.pull import Pull
from servekit.vocabulary import KvProtocol

HANDLERS: dict[KvProtocol, Handler] = {
    h.protocol: h for h in (Pull(), Bootstrap(), PromptKeyed(), Layerwise())
}
