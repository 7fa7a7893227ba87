"""How a KV connector hands the prompt's KV to decode: one table, read by the Plan.

Four protocols, each what the named connector really does (issue 24 recorded
them from real engines; ``tests/fixtures/kv_params`` holds the facts):

- ``params`` (pull): the prefill answers ``kv_transfer_params`` naming its
  blocks and side channel (``do_remote_prefill``, ``remote_block_ids``,
  ``remote_engine_id``, ``remote_request_id``, ``remote_host``, ``remote_port``,
  ...); the proxy passes them to decode unchanged and the decoder pulls. vLLM's
  NixlConnector and vllm-ascend's Mooncake connectors. Any connector not named
  below is taken to read the params too: the strict guard is the safe default.
- ``bootstrap``: vLLM's own MooncakeConnector. The proxy sends the prefill
  ``{do_remote_decode, transfer_id}``, the prefill answers with no params, and
  the proxy itself builds the decode request's ``{do_remote_prefill,
  transfer_id, remote_engine_id, remote_bootstrap_addr}`` (the prefill's
  bootstrap server, which answers ``/query``).
- ``layerwise``: vllm-ascend's MooncakeLayerwiseConnector. The proxy sends the
  decoder ``{do_remote_decode: false, do_remote_prefill: true, metaserver}``
  first; the decoder POSTs its blocks to the proxy's ``/v1/metaserver``, and
  only then does the proxy send the prefill, which pushes the KV layer by layer
  (servekit.proxy.protocols.layerwise; the guard trusts only the deployment's own
  metaserver, ``SERVEKIT_GUARD_METASERVER``).
- ``prompt`` (prompt-keyed): ExampleConnector saves the KV under a digest of the
  prompt and the decoder finds it there; it never reads ``kv_transfer_params``,
  so only its decoders accept servekit's prompt-keyed marker.

The decode guard's mode follows from the same table (:func:`guard_mode_of`):
``strict`` wherever the connector reads the params, ``prompt-keyed`` only for
prompt-keyed connectors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from servekit.vocabulary import PROXY_MODE_OF, GuardMode, KvProtocol

PROMPT_KEYED_CONNECTORS = frozenset({"ExampleConnector", "SharedStorageConnector"})
BOOTSTRAP_CONNECTORS = frozenset({"MooncakeConnector"})
LAYERWISE_CONNECTOR = "MooncakeLayerwiseConnector"  # vllm-ascend; selects proxy mode layerwise
LAYERWISE_CONNECTORS = frozenset({LAYERWISE_CONNECTOR})

# vLLM's own connectors read their side-channel / bootstrap port from the
# environment, not from --kv-transfer-config's kv_port: the Plan sets it from
# the engine's (mapped) kv_port so two engines on one machine never share it.
KV_PORT_ENV: dict[str, str] = {
    "NixlConnector": "VLLM_NIXL_SIDE_CHANNEL_PORT",
    "MooncakeConnector": "VLLM_MOONCAKE_BOOTSTRAP_PORT",
}


# How long a prefill keeps the KV it holds for a decoder (its lease), by where
# the connector reads it. vLLM 0.32's NixlConnector: kv_connector_extra_config
# ``kv_lease_duration`` (30 s; nixl/base_scheduler.py); vLLM's own
# MooncakeConnector (bootstrap): VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT (480 s,
# envs.py); vllm-ascend's Mooncake connectors (pull) read vLLM's
# VLLM_NIXL_ABORT_REQUEST_TIMEOUT (480 s in the vLLM releases that define it).
# The Plan gives the proxy the shortest of the prefills' (--kv-lease); push and
# prompt-keyed handoffs hold no lease.
LeaseSource = tuple[Literal["extra_config", "env"], str, int]
NIXL_LEASE: LeaseSource = ("extra_config", "kv_lease_duration", 30)
LEASE_ENV: dict[KvProtocol, LeaseSource] = {
    "params": ("env", "VLLM_NIXL_ABORT_REQUEST_TIMEOUT", 480),
    "bootstrap": ("env", "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT", 480),
}


@dataclass(frozen=True)
class Handoff:
    """What the proxy and the simulator need to know of one protocol, beyond its name.

    Each protocol has one handler module of that ``module`` name in
    ``servekit.proxy.protocols`` and in ``servekit.sim.protocols``, chosen by
    :data:`HANDOFFS` (the only place the protocol words are told apart).
    """

    module: str
    holds_lease: bool  # the prefill keeps the KV for its decoder until the lease passes
    decoder_first: bool  # the decoder is asked first and calls the proxy back (metaserver)
    bootstrap_server: bool  # the proxy names the prefill's bootstrap server to the decoder


HANDOFFS: dict[KvProtocol, Handoff] = {
    "params": Handoff("pull", holds_lease=True, decoder_first=False, bootstrap_server=False),
    "bootstrap": Handoff("bootstrap", holds_lease=True, decoder_first=False, bootstrap_server=True),
    "prompt": Handoff(
        "prompt_keyed", holds_lease=False, decoder_first=False, bootstrap_server=False
    ),
    "layerwise": Handoff(
        "layerwise", holds_lease=False, decoder_first=True, bootstrap_server=False
    ),
}

# The protocol a proxy mode carries (``replica`` carries none).
PROTOCOL_OF_MODE: dict[str, KvProtocol] = {mode: p for p, mode in PROXY_MODE_OF.items()}


def protocol_of_mode(mode: str) -> KvProtocol | None:
    """The handoff protocol of the proxy mode ``mode`` (None: replica, no handoff)."""
    return PROTOCOL_OF_MODE.get(mode)


def handoff_of_mode(mode: str) -> Handoff | None:
    """The :class:`Handoff` row of the proxy mode ``mode`` (None: replica)."""
    protocol = protocol_of_mode(mode)
    return None if protocol is None else HANDOFFS[protocol]


def lease_source(connector: str, engine_kind: str = "vllm") -> LeaseSource | None:
    """Where the connector reads its KV lease (setting kind, name, default seconds)."""
    if connector == "NixlConnector" and engine_kind != ASCEND_KIND:
        return NIXL_LEASE
    return LEASE_ENV.get(protocol_of(connector, engine_kind))


# One connector name, two programs: on vllm-ascend, ``MooncakeConnector`` is
# vllm-ascend's own (the pull protocol, its kv_port in --kv-transfer-config);
# only vLLM's own MooncakeConnector (vllm, vllm-cpu) speaks bootstrap.
ASCEND_KIND = "vllm-ascend"


def protocol_of(connector: str, engine_kind: str = "vllm") -> KvProtocol:
    """The handoff protocol of the connector named ``connector`` on ``engine_kind``."""
    if connector in PROMPT_KEYED_CONNECTORS:
        return "prompt"
    if connector in LAYERWISE_CONNECTORS:
        return "layerwise"
    if connector in BOOTSTRAP_CONNECTORS and engine_kind != ASCEND_KIND:
        return "bootstrap"
    return "params"


def kv_port_env(connector: str, engine_kind: str = "vllm") -> str | None:
    """The variable vLLM's own connector reads its side-channel port from (none on Ascend)."""
    return None if engine_kind == ASCEND_KIND else KV_PORT_ENV.get(connector)


def guard_mode_of(connector: str, engine_kind: str = "vllm") -> GuardMode:
    """The decode guard's mode for a decoder whose connector is ``connector``."""
    return "prompt-keyed" if protocol_of(connector, engine_kind) == "prompt" else "strict"


# vLLM's KV connectors go by an engine id per DP rank: when an engine's data_parallel_size
# is above 1 (or its rank above 0), each rank's engine core sets kv_transfer_config.engine_id
# to ``<engine_id>_dp<rank>`` (vllm/v1/engine/core.py run_engine_core; Ray's
# _apply_dp_identity_suffix in vllm/v1/engine/utils.py), ``rank`` the global DP rank (its
# --data-parallel-rank, or its start rank plus its local index). The MooncakeConnector's
# bootstrap server answers one entry per registered rank under that id, so a decoder must
# be told the suffixed one.
DP_SUFFIX = "_dp"
BOOTSTRAP_PORT_DEFAULT = 8998  # vLLM's VLLM_MOONCAKE_BOOTSTRAP_PORT when unset (envs.py)


def kv_engine_id(engine_id: str, dp_rank: int | None, dp_size: int | None) -> str:
    """The engine id rank ``dp_rank`` of an engine of ``dp_size`` ranks registers its KV
    under (vLLM's suffix); ``engine_id`` itself without DP."""
    if (dp_size or 1) > 1 or (dp_rank or 0) > 0:
        return f"{engine_id}{DP_SUFFIX}{dp_rank or 0}"
    return engine_id
