"""The decode guard rule (servekit.guard), checked against an independent spec."""

from __future__ import annotations

import json

from hypothesis import given

from proxy.guard_spec import METHODS, PATHS, RELAXED, SUFFIXES, bodies, oracle
from servekit.guard import (
    GUARD_ERROR_CODE,
    guard_error_body,
    guard_rejects,
    is_guarded_path,
)


@RELAXED
@given(METHODS, PATHS, bodies())
def test_rule_matches_the_spec_exactly(method: str, path: str, body: bytes) -> None:
    assert guard_rejects(method, path, body) is oracle(method, path, body)


@given(PATHS)
def test_only_post_to_generation_paths_is_guarded(path: str) -> None:
    stem = path.rstrip("/")
    assert is_guarded_path("POST", path) is stem.endswith(SUFFIXES)
    assert not is_guarded_path("GET", path)


def test_incident_shaped_request_is_refused_and_pd_request_passes() -> None:
    plain = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 128}).encode()
    assert guard_rejects("POST", "/v1/completions", plain)
    empty = json.dumps({"prompt": "hi", "kv_transfer_params": {}}).encode()
    assert guard_rejects("POST", "/v1/chat/completions", empty)
    pd = json.dumps({"prompt": "hi", "kv_transfer_params": {"remote_engine_id": "e"}}).encode()
    assert not guard_rejects("POST", "/v1/completions", pd)
    assert not guard_rejects("GET", "/health", b"")
    assert not guard_rejects("POST", "/v1/completions", b"not json")


def test_error_body_carries_the_machine_readable_code() -> None:
    doc = json.loads(guard_error_body("/v1/completions"))
    assert doc["error"]["code"] == GUARD_ERROR_CODE
    assert doc["error"]["type"] == "invalid_request_error"
    assert "kv_transfer_params" in doc["error"]["message"]
