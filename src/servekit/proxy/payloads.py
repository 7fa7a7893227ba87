"""The bodies the proxy sends to each stage, per vLLM's kv_transfer_params protocol.

The prefill copy asks for one token, unstreamed, and announces a remote decode
(NIXL, Mooncake and vllm-ascend's Mooncake connectors all read these keys); the
decode request is the client's request with the prefill's answer in
``kv_transfer_params``. The prompt-keyed mode (ExampleConnector, which keys the
KV by prompt) sends the same prefill copy without kv_transfer_params and the
client's request to decode with exactly the marker as ``kv_transfer_params``
(:data:`PROMPT_KEYED_MARK`, whatever the client put there): such connectors
never read the field and vLLM's scheduler only acts on
``do_remote_prefill``/``do_remote_decode``, while the decode guard sees a routed
request and lets it through. Decode instances keep their guard against plain
requests sent to them directly.

vLLM's MooncakeConnector speaks the bootstrap protocol instead: the prefill copy
announces ``{do_remote_decode: true, transfer_id}`` (a fresh id per attempt), the
prefill answers no params, and the decode request carries
``{do_remote_prefill: true, transfer_id, remote_engine_id, remote_bootstrap_addr}``
built here from the prefill instance's bootstrap server (``--prefill-bootstrap``).

A prefill answer's params are forwarded only when the decode guard
(:func:`servekit.guard.asks_remote_prefill`) would let them through, so the
proxy never sends a decoder something that makes it prefill by itself.
"""

from __future__ import annotations

from typing import Any

from servekit.guard import PROMPT_KEYED_KEY, asks_remote_prefill

PREFILL_KV_PARAMS: dict[str, Any] = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def prefill_payload(
    route: str, body: dict[str, Any], with_kv_params: bool, kv_params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A copy of ``body`` that only prefills: one token, no stream.

    ``kv_params`` replaces the pull protocol's announcement (bootstrap mode).
    """
    payload = dict(body)
    payload["stream"] = False
    payload.pop("stream_options", None)
    if route.endswith("/responses"):
        payload["max_output_tokens"] = 1
    else:
        payload["max_tokens"] = 1
        payload["min_tokens"] = 1
        if "max_completion_tokens" in payload:
            payload["max_completion_tokens"] = 1
    if kv_params is not None:
        payload["kv_transfer_params"] = dict(kv_params)
    elif with_kv_params:
        payload["kv_transfer_params"] = dict(PREFILL_KV_PARAMS)
    else:
        payload.pop("kv_transfer_params", None)
    return payload


PROMPT_KEYED_MARK: dict[str, Any] = {PROMPT_KEYED_KEY: True}


def prompt_keyed_decode_payload(body: dict[str, Any]) -> dict[str, Any]:
    """The client's request marked as routed (the client's own params are replaced)."""
    return {**body, "kv_transfer_params": dict(PROMPT_KEYED_MARK)}


def kv_params_of(prefill_response: Any) -> dict[str, Any] | None:
    """A prefill answer's kv_transfer_params when they ask for a remote prefill, else None."""
    if not isinstance(prefill_response, dict):
        return None
    params = prefill_response.get("kv_transfer_params")
    return params if asks_remote_prefill(params) else None


def decode_payload(body: dict[str, Any], kv_params: dict[str, Any]) -> dict[str, Any]:
    """The client's request carrying the prefill's kv_transfer_params."""
    return {**body, "kv_transfer_params": kv_params}


def bootstrap_prefill_params(transfer_id: str) -> dict[str, Any]:
    """What a MooncakeConnector prefill is told: send this transfer's KV when asked."""
    return {"do_remote_decode": True, "transfer_id": transfer_id}


def bootstrap_decode_params(transfer_id: str, engine_id: str, bootstrap: str) -> dict[str, Any]:
    """What a MooncakeConnector decoder needs to pull the transfer from the prefill."""
    return {
        "do_remote_prefill": True,
        "transfer_id": transfer_id,
        "remote_engine_id": engine_id,
        "remote_bootstrap_addr": bootstrap,
    }
