"""How a PD pair hands over the KV, and what the proxy and the decode guard do about it.

:data:`KvProtocol` is what a KV connector does (servekit.kvprotocol maps a
connector to one); :data:`ProxyMode` is how the proxy routes a request, one
mode per protocol plus ``pd`` (the pull protocol) and ``replica`` (no PD);
:data:`LayoutProxyMode` is what a layout may write (bootstrap follows from the
connector, never from the layout); :data:`GuardMode` is how strict the decode
guard is. Standard library only: the proxy's zipapp imports it.
"""

from __future__ import annotations

from typing import Literal, get_args

KvProtocol = Literal["params", "bootstrap", "prompt", "layerwise"]
"""How a connector hands the prompt's KV to decode (see servekit.kvprotocol)."""
KV_PROTOCOLS: tuple[KvProtocol, ...] = get_args(KvProtocol)

LayoutProxyMode = Literal["pd", "prompt-keyed", "layerwise", "replica"]
"""The proxy modes a layout may name."""
LAYOUT_PROXY_MODES: tuple[LayoutProxyMode, ...] = get_args(LayoutProxyMode)

ProxyMode = Literal["pd", "bootstrap", "prompt-keyed", "layerwise", "replica"]
"""How the proxy routes a request (``python -m servekit.proxy --mode``)."""
PROXY_MODES: tuple[ProxyMode, ...] = get_args(ProxyMode)

PD_PROXY_MODES: tuple[LayoutProxyMode, ...] = ("pd", "prompt-keyed", "layerwise")
"""The layout's proxy modes that need a prefill/decode pair."""
PAIRED_PROXY_MODES: tuple[ProxyMode, ...] = ("pd", "bootstrap")
"""The proxy modes that pair one prefill answer with one decode request."""

PROXY_MODE_OF: dict[KvProtocol, ProxyMode] = {
    "params": "pd",
    "bootstrap": "bootstrap",
    "prompt": "prompt-keyed",
    "layerwise": "layerwise",
}
"""The proxy mode that carries each handoff protocol."""

GuardMode = Literal["strict", "prompt-keyed"]
"""The decode guard: strict (only routed params pass) or also the prompt-keyed marker."""
