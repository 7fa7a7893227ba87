"""The decode guard rule, shared by the ASGI middleware, the proxy and the simulator.

Incident (first seed): a plain request sent straight to a decode-role instance
made the decoder prefill by itself, hit a fixed replay limit, and killed the
whole engine (about 20 minutes of weight reloading). The rule: a POST to a
completions, chat or responses path whose JSON body has no non-empty
``kv_transfer_params`` is refused with 400. Everything else passes untouched.

This module is pure and imports nothing outside the standard library, so the
middleware loaded into vLLM with ``--middleware`` and the simulator apply the
exact same rule.
"""

from __future__ import annotations

import json

GUARD_ERROR_CODE = "decode_role_requires_kv_transfer_params"
GUARDED_SUFFIXES = ("/chat/completions", "/completions", "/responses")


def is_guarded_path(method: str, path: str) -> bool:
    """True for a POST to a generation path (trailing slash tolerated)."""
    if method.upper() != "POST":
        return False
    trimmed = path.rstrip("/")
    return trimmed.endswith(GUARDED_SUFFIXES)


def body_has_kv_transfer_params(body: bytes) -> bool | None:
    """Whether a JSON object body carries non-empty kv_transfer_params.

    Returns None when the body is not a JSON object: such a request passes the
    guard (the engine rejects it on its own terms without prefilling anything).
    """
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict):
        return None
    params = doc.get("kv_transfer_params")
    return isinstance(params, dict) and len(params) > 0


def guard_rejects(method: str, path: str, body: bytes) -> bool:
    """The whole rule: True when a decode-role instance must answer 400."""
    if not is_guarded_path(method, path):
        return False
    return body_has_kv_transfer_params(body) is False


def guard_error_body(path: str) -> bytes:
    """The 400 body: OpenAI-style error with a machine-readable code."""
    return json.dumps(
        {
            "error": {
                "message": (
                    f"{path} on a decode-role instance requires non-empty kv_transfer_params; "
                    "send requests through the PD proxy"
                ),
                "type": "invalid_request_error",
                "code": GUARD_ERROR_CODE,
            }
        }
    ).encode()
