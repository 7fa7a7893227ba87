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

import ast
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings, strategies as st

RELAXED = settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)

MARK_KEY = "servekit_prompt_keyed"
PULL_KEYS = ("remote_engine_id", "remote_request_id", "remote_host")
BOOT_KEYS = ("remote_engine_id", "remote_bootstrap_addr", "transfer_id")


INT64_MAX = 9_223_372_036_854_775_807
"""The largest block id: vLLM holds block ids in int64 tensors and numpy arrays, so a
larger one cannot name a block (it overflows where the connector converts it)."""


def _plain_int(v: Any) -> bool:
    return type(v) is int


def _block_id(b: Any) -> bool:
    return _plain_int(b) and 0 <= b <= INT64_MAX


def _ids_ok(v: Any) -> bool:
    if type(v) is not list or len(v) == 0:
        return False
    flat = [b for b in v if _block_id(b)]
    if len(flat) == len(v):
        return True
    for group in v:
        if type(group) is not list or not all(_block_id(b) for b in group):
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

EDGE_IDS = [0, -1, INT64_MAX - 1, INT64_MAX, INT64_MAX + 1, 2**64, 2**70, -(2**63)]
"""Block ids at and beyond both bounds (0 and int64's largest)."""
EDGE_PORTS = [0, -1, 65535, 65536, 2**63, 2**70]
WRONG = st.sampled_from(
    [None, "", "x", "true", "1", 0, 1, -1, 1.5, True, False, [], [1], {}, {"a": 1}, 2**70,
     *EDGE_PORTS]
)  # fmt: skip
ID = st.one_of(st.integers(-2, 9), st.sampled_from(EDGE_IDS))
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                      st.text(max_size=6))  # fmt: skip
BLOCK_IDS = st.one_of(
    WRONG, st.lists(ID, max_size=3), st.lists(st.lists(ID, max_size=2), max_size=3),
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

# The spec's reading of vLLM 0.32's POST routes (the guard's list has the same source:
# vLLM's router). Each route found in the installed vLLM must be in one of these three,
# so a route a new vLLM adds fails test_every_vllm_route_is_classified until it is read.
NEVER_RUN_THE_MODEL = [  # allow-listed: these never generate
    "/tokenize", "/detokenize", "/metrics", "/ping", "/v1/completions/render",
    "/v1/chat/completions/render", "/v1/messages/render", "/v1/responses/render",
    "/v1/completions/derender", "/v1/chat/completions/derender", "/v1/messages/count_tokens",
    "/v1/responses/resp_1/cancel", "/reset_prefix_cache", "/reset_mm_cache",
    "/reset_encoder_cache", "/sleep", "/wake_up", "/release_kv_cache_memory", "/start_profile",
    "/stop_profile", "/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/abort_requests",
    "/inference/v1/abort_requests", "/pause", "/resume", "/scale_elastic_ep",
    "/is_scaling_elastic_ep",
]  # fmt: skip
RUN_THE_MODEL = [  # generating (or pooling, which runs a prefill): guarded
    "/v1/completions", "/v1/chat/completions", "/v1/chat/completions/batch", "/v1/responses",
    "/v1/messages", "/invocations", "/inference/v1/generate", "/pooling", "/classify",
    "/v1/embeddings", "/v2/embed", "/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank",
    "/v1/audio/transcriptions", "/v1/audio/translations", "/v1/realtime", "/cohere/v2/chat",
    "/generative_scoring", "/v1/systemone",
]  # fmt: skip
FAIL_CLOSED = [  # never generate, but not on the allow-list: guarded all the same
    "/cohere/v2/chat/render", "/collective_rpc", "/fault_tolerance/apply",
    "/finish_weight_update", "/init_weight_transfer_engine", "/shutdown_weight_transfer_engine",
    "/start_draft_weight_update", "/start_weight_update", "/update_weight_version",
    "/update_weights", "/weight_checker",
]  # fmt: skip
ROUTE_CALLS = {"post", "api_route", "websocket", "add_api_route", "add_websocket_route"}


def vllm_post_routes() -> list[str]:
    """Every POST or websocket route of the installed vLLM's API server, as request paths.

    Read from vLLM's ``entrypoints`` source with :mod:`ast` (the decorators and
    ``add_api_route`` calls), not by importing vLLM: the same routes the guard's
    list was read from, for this vLLM. ``{param}`` becomes ``resp_1``.
    """
    found = importlib.util.find_spec("vllm")
    if found is None or found.origin is None:
        return []
    routes: set[str] = set()
    for file in sorted((Path(found.origin).parent / "entrypoints").rglob("*.py")):
        try:
            tree = ast.parse(file.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            first = node.args[0] if node.args else None
            value = first.value if isinstance(first, ast.Constant) else None
            if node.func.attr in ROUTE_CALLS and isinstance(value, str) and value.startswith("/"):
                routes.add(re.sub(r"\{[^/{}]+\}", "resp_1", value))
    return sorted(routes)


VLLM_ROUTES = vllm_post_routes()
NEVER = NEVER_RUN_THE_MODEL
GENERATING = [*RUN_THE_MODEL, "/v1/completionsx", "/", "/v1/responses/resp_1", "/unknown/route"]
PATHS = st.one_of(
    st.sampled_from(sorted({*NEVER, *GENERATING, *FAIL_CLOSED, *VLLM_ROUTES})),
    st.sampled_from(sorted({*NEVER, *VLLM_ROUTES})).map(lambda p: p + "/"),
    st.builds(
        lambda a, b: "/" + a + b, st.text("/abcv1_-", max_size=10), st.sampled_from(["", "/"])
    ),
)


def oracle_path_guarded(method: str, path: str) -> bool:
    """The path rule (no router): every POST but the allow-listed paths."""
    if method.upper() != "POST":
        return False
    stem = path.rstrip("/") or "/"
    allowed = set(NEVER_RUN_THE_MODEL)
    if stem.startswith("/v1/responses/") and stem.endswith("/cancel") and stem.count("/") == 4:
        return False
    return stem not in allowed and path not in allowed
