"""The decode guard spec, written apart from servekit.guard, and the bodies it is tried on.

Spec (issue 13, item 1): on a decode instance a generation request passes only
when its ``kv_transfer_params`` ask for a remote prefill (``do_remote_prefill``
is JSON ``true`` and the connector's fields are there with the right types:
``remote_block_ids``, ``remote_engine_id``, ``remote_request_id``,
``remote_host``, ``remote_port`` for NIXL / vllm-ascend's Mooncake;
``remote_engine_id``, ``remote_bootstrap_addr``, ``transfer_id`` for vLLM's
Mooncake) or are exactly the prompt-keyed marker (not in strict mode).
Everything else is refused, bodies that are not JSON objects included.

:func:`connector_pulls` is the other side: what vLLM 0.32's NIXL scheduler and
vllm-ascend's Mooncake scheduler check before pulling KV (truthiness and key
presence only). A body the guard lets through that the connector would not
pull for is a *bypass*: the decoder would prefill by itself, the incident.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

RELAXED = settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)

MARK_KEY = "servekit_prompt_keyed"
PULL_KEYS = ("remote_engine_id", "remote_request_id", "remote_host")
BOOT_KEYS = ("remote_engine_id", "remote_bootstrap_addr", "transfer_id")


def _plain_int(v: Any) -> bool:
    return type(v) is int


def _ids_ok(v: Any) -> bool:
    if type(v) is not list or len(v) == 0:
        return False
    flat = [b for b in v if _plain_int(b) and b >= 0]
    if len(flat) == len(v):
        return True
    for group in v:
        if type(group) is not list or not all(_plain_int(b) and b >= 0 for b in group):
            return False
    return sum(len(g) for g in v) > 0


def oracle_params(kv: Any, strict: bool = True) -> bool:
    """The spec on the value of kv_transfer_params."""
    if type(kv) is not dict:
        return False
    if not strict and list(kv) == [MARK_KEY] and kv[MARK_KEY] is True:
        return True
    if kv.get("do_remote_prefill") is not True:
        return False
    if all(type(kv.get(k)) is str and kv[k] for k in BOOT_KEYS):
        return True
    texts = all(type(kv.get(k)) is str and kv[k] for k in PULL_KEYS)
    port = kv.get("remote_port")
    return texts and _plain_int(port) and 0 <= port <= 65535 and _ids_ok(kv.get("remote_block_ids"))


def oracle_body(body: bytes, strict: bool = True) -> bool:
    """The spec on a whole body: True when it passes."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return type(doc) is dict and oracle_params(doc.get("kv_transfer_params"), strict)


def is_mark(kv: Any) -> bool:
    return type(kv) is dict and list(kv) == [MARK_KEY] and kv[MARK_KEY] is True


def connector_pulls(kv: Any) -> bool:
    """Whether NIXL (vLLM 0.32) or a Mooncake connector would pull KV for these params."""
    if not isinstance(kv, dict) or not kv.get("do_remote_prefill"):
        return False
    pull = bool(kv.get("remote_block_ids")) and all(k in kv for k in (*PULL_KEYS, "remote_port"))
    return pull or all(k in kv for k in BOOT_KEYS)


# -- prefill answers as each connector writes them -----------------------------

NIXL = {  # vLLM 0.32 nixl/pull_scheduler.py request_finished, hybrid allocator groups
    "do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": [[3, 4, 5]],
    "remote_engine_id": "5c2f1e7a-engine", "remote_request_id": "cmpl-abc-0",
    "remote_host": "10.0.0.1", "remote_port": 5600, "tp_size": 1, "dcp_size": 1, "pp_size": 1,
    "remote_num_tokens": 40, "remote_blocks_expiry_time": None, "transfer_mode": "pull",
}  # fmt: skip
ASCEND = {  # vllm-ascend mooncake_connector.py request_finished (v0.21+)
    "do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": [[1, 2], [7]],
    "remote_engine_id": "0", "remote_request_id": "chatcmpl-1", "remote_host": "192.168.1.5",
    "remote_port": 30000, "remote_pcp_size": 1, "remote_dcp_size": 1, "remote_ptp_size": 8,
    "last_token_id": 42, "remote_multi_nodes_meta_mapping": {}, "num_prompt_blocks": 2,
}  # fmt: skip
FLAT = {  # older NIXL: one flat list of block ids
    "do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": [0, 1, 2],
    "remote_engine_id": "p0", "remote_request_id": "r", "remote_host": "127.0.0.1",
    "remote_port": 0, "tp_size": 1,
}  # fmt: skip
BOOTSTRAP = {  # vLLM 0.32's own MooncakeConnector (router-driven)
    "do_remote_prefill": True, "remote_engine_id": "e1",
    "remote_bootstrap_addr": "10.0.0.1:8998", "transfer_id": "xfer-1",
}  # fmt: skip
PREFILL_ANSWERS = (NIXL, ASCEND, FLAT, BOOTSTRAP)

# -- hostile kv_transfer_params ------------------------------------------------

WRONG = st.sampled_from(
    [None, "", "x", "true", "1", 0, 1, -1, 1.5, True, False, [], [1], {}, {"a": 1}, 2**70]
)
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                      st.text(max_size=6))  # fmt: skip
BLOCK_IDS = st.one_of(
    WRONG, st.lists(st.integers(-2, 9), max_size=3),
    st.lists(st.lists(st.integers(-1, 9), max_size=2), max_size=3),
    st.lists(st.one_of(st.integers(0, 9), st.booleans(), st.floats(0, 9), st.text(max_size=2)),
             min_size=1, max_size=3),
)  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    """A real prefill answer with fields dropped or replaced by wrong values."""
    kv = dict(draw(st.sampled_from(PREFILL_ANSWERS)))
    for key in draw(st.lists(st.sampled_from(sorted(kv)), max_size=3, unique=True)):
        action = draw(st.sampled_from(["drop", "wrong", "leaf", "ids"]))
        if action == "drop":
            del kv[key]
        elif action == "ids":
            kv[key] = draw(BLOCK_IDS)
        else:
            kv[key] = draw(WRONG if action == "wrong" else JSON_LEAF)
    if draw(st.booleans()):
        kv["do_remote_prefill"] = draw(st.sampled_from([True, False, None, 1, "true", "True", 1.0]))
    return kv


MARKS = st.sampled_from(
    [{MARK_KEY: True}, {MARK_KEY: 1}, {MARK_KEY: "true"}, {MARK_KEY: False}, {MARK_KEY: None},
     {MARK_KEY: True, "do_remote_prefill": False}, {MARK_KEY: True, "x": 1}, {"prompt_keyed": True}]
)  # fmt: skip
KV_VALUES = st.one_of(
    mutated(), MARKS, WRONG, st.sampled_from(PREFILL_ANSWERS),
    st.dictionaries(st.text(max_size=8), JSON_LEAF, max_size=3),
)  # fmt: skip
CLIENT_FIELDS = st.dictionaries(
    st.sampled_from(["model", "prompt", "messages", "stream", "max_tokens", "input", "n"]),
    JSON_LEAF, max_size=4,
)  # fmt: skip


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """Request bodies a careless or hostile client could send to a decoder."""
    kind = draw(st.sampled_from(["object", "object", "object", "twice", "utf16", "other", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "other":
        return json.dumps(draw(st.one_of(JSON_LEAF, st.lists(JSON_LEAF, max_size=3)))).encode()
    doc = draw(CLIENT_FIELDS)
    if draw(st.integers(0, 9)) > 0:
        doc["kv_transfer_params"] = draw(KV_VALUES)
    if kind == "twice":  # duplicate keys: json.loads keeps the last, as the engine does
        first = json.dumps({"kv_transfer_params": draw(st.sampled_from(PREFILL_ANSWERS))})
        return (first[:-1] + ", " + json.dumps(doc)[1:]).encode() if doc else first.encode()
    text = json.dumps(doc)
    return text.encode("utf-16") if kind == "utf16" else text.encode()


def kv_of(body: bytes) -> Any:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return doc.get("kv_transfer_params") if isinstance(doc, dict) else None


# -- paths -----------------------------------------------------------------------

METHODS = st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "post"])
NEVER = ["/tokenize", "/detokenize", "/metrics", "/reset_prefix_cache", "/v1/completions/render",
         "/v1/responses/resp_1/cancel", "/sleep", "/v1/load_lora_adapter", "/ping"]  # fmt: skip
GENERATING = ["/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages",
              "/invocations", "/inference/v1/generate", "/pooling", "/v1/embeddings",
              "/v1/audio/transcriptions", "/cohere/v2/chat", "/v1/completionsx", "/",
              "/v1/responses/resp_1", "/unknown/route"]  # fmt: skip
PATHS = st.one_of(
    st.sampled_from(NEVER + GENERATING),
    st.builds(
        lambda a, b: "/" + a + b, st.text("/abcv1_-", max_size=10), st.sampled_from(["", "/"])
    ),
)


def oracle_path_guarded(method: str, path: str) -> bool:
    """The path rule (no router): every POST but the allow-listed paths."""
    if method.upper() != "POST":
        return False
    stem = path.rstrip("/") or "/"
    allowed = {p.rstrip("/") for p in NEVER} | {
        "/v1/chat/completions/render", "/detokenize", "/wake_up", "/start_profile",
    }  # fmt: skip
    if stem.startswith("/v1/responses/") and stem.endswith("/cancel") and stem.count("/") == 4:
        return False
    return stem not in allowed and path not in allowed
