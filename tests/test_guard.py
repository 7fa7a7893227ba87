"""The decode guard rule (servekit.guard) on the cases that matter most.

The property tests over paths, methods and bodies live in
tests/proxy/test_guard_rule.py (rule) and tests/proxy/test_guard_middleware.py
(the ASGI middleware), beside the spec they share.
"""

from __future__ import annotations

import json

from servekit.guard import GUARD_ERROR_CODE, guard_error_body, guard_rejects


def test_incident_shaped_request_is_refused_and_pd_request_passes() -> None:
    plain = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 128}).encode()
    assert guard_rejects("POST", "/v1/completions", plain)
    empty = json.dumps({"prompt": "hi", "kv_transfer_params": {}}).encode()
    assert guard_rejects("POST", "/v1/chat/completions", empty)
    pd = json.dumps({"prompt": "hi", "kv_transfer_params": {"remote_engine_id": "e"}}).encode()
    assert not guard_rejects("POST", "/v1/completions", pd)
    assert not guard_rejects("GET", "/health", b"")
    assert not guard_rejects("POST", "/v1/completions", b"not json")


def test_bodies_the_engine_would_parse_are_judged_like_the_engine_parses_them() -> None:
    plain = {"prompt": "hi", "max_tokens": 128}
    for encoded in (
        json.dumps(plain).encode("utf-16"),
        b"\xef\xbb\xbf" + json.dumps(plain).encode(),
        json.dumps(plain).encode("utf-32"),
    ):
        assert json.loads(encoded) == plain  # what FastAPI hands to vLLM
        assert guard_rejects("POST", "/v1/completions", encoded)


def test_error_body_carries_the_machine_readable_code() -> None:
    doc = json.loads(guard_error_body("/v1/completions"))
    assert doc["error"]["code"] == GUARD_ERROR_CODE
    assert doc["error"]["type"] == "invalid_request_error"
    assert "kv_transfer_params" in doc["error"]["message"]
