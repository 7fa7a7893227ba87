"""The decode guard spec, written independently of servekit.guard, and its inputs.

Spec (verification.md): a POST whose path ends in /chat/completions,
/completions or /responses and whose JSON body has no kv_transfer_params
(missing, null or {}) gets 400. Everything else passes: other methods and
paths, bodies that are not JSON (or not JSON objects). Shared by the rule's
tests and the middleware's tests.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Loaded CI runners make input generation look slow; the property, not speed, is tested.
RELAXED = settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)

SUFFIXES = ("/chat/completions", "/completions", "/responses")


def oracle(method: str, path: str, body: bytes) -> bool:
    """The spec, written again without looking at the implementation."""
    if method.upper() != "POST":
        return False
    stem = path[:-1] if path.endswith("/") else path
    while stem.endswith("/"):
        stem = stem[:-1]
    if not any(stem.endswith(s) for s in SUFFIXES):
        return False
    try:
        # The engine's own parser (Starlette's Request.json is json.loads on the
        # bytes), so UTF-16 or BOM-prefixed JSON counts as JSON, as it does there.
        doc = json.loads(body)
    except ValueError:
        return False
    if not isinstance(doc, dict):
        return False
    kv = doc.get("kv_transfer_params")
    return not (isinstance(kv, dict) and kv)


METHODS = st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "post"])
KNOWN_PATHS = [
    "/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/completions/",
    "/v1/chat/completions//", "/completions", "/v1/responses/resp_1", "/health", "/v1/models",
    "/metrics", "/tokenize", "/v1/completionsx", "/v1/chat", "/", "/v1/embeddings",
    "/pooling", "/v1/responses/resp_1/cancel",
]  # fmt: skip
PATHS = st.one_of(
    st.sampled_from(KNOWN_PATHS),
    st.builds(
        lambda a, b, c: a + b + c,
        st.text("/abcv1_-", max_size=12).map(lambda t: "/" + t),
        st.sampled_from(["", *SUFFIXES]),
        st.sampled_from(["", "/", "x"]),
    ),
)
KV_VALUES = st.one_of(
    st.none(), st.just({}), st.just([]), st.just(""), st.just("x"), st.integers(), st.just([1]),
    st.dictionaries(st.text(max_size=8), st.one_of(st.none(), st.integers(), st.text(max_size=5)),
                    min_size=1, max_size=3),
)  # fmt: skip
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10))


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["object", "object_kv", "other_json", "garbage"]))
    if kind == "garbage":
        return draw(st.binary(max_size=64))
    if kind == "other_json":
        return json.dumps(draw(st.one_of(JSON_LEAF, st.lists(JSON_LEAF, max_size=4)))).encode()
    doc: dict[str, Any] = draw(st.dictionaries(st.sampled_from(["model", "prompt", "stream",
                                "messages", "max_tokens"]), JSON_LEAF, max_size=4))  # fmt: skip
    if kind == "object_kv":
        doc["kv_transfer_params"] = draw(KV_VALUES)
    return json.dumps(doc).encode()
