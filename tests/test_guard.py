"""The decode guard rule (servekit.guard) on the cases of the incident and of issue 13.

The property tests over paths, methods and bodies live in
tests/proxy/test_guard_rule.py (rule) and tests/proxy/test_guard_middleware.py
(the ASGI middleware), beside the spec they share.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import servekit.guard
from servekit.guard import (
    GUARD_ERROR_CODE,
    body_passes,
    guard_error_body,
    guard_rejects,
    middleware_target,
    source_bytes,
    source_path,
)

ROUTED = {
    "do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": [1, 2],
    "remote_engine_id": "p0", "remote_request_id": "r1", "remote_host": "10.0.0.1",
    "remote_port": 5600,
}  # fmt: skip


def completions(kv: object = None, **extra: object) -> bytes:
    doc: dict[str, object] = {"model": "m", "prompt": "hi", "max_tokens": 128, **extra}
    if kv is not None:
        doc["kv_transfer_params"] = kv
    return json.dumps(doc).encode()


def test_issue_13_bypasses_are_refused() -> None:
    """Any non-empty kv_transfer_params used to pass; the decoder then prefilled by itself."""
    for kv in ({"do_remote_prefill": False}, {"foo": 1}, {"remote_engine_id": "e"},
               {**ROUTED, "do_remote_prefill": False}, {**ROUTED, "do_remote_prefill": "true"},
               {k: v for k, v in ROUTED.items() if k != "remote_block_ids"},
               {**ROUTED, "remote_block_ids": []}, {**ROUTED, "remote_port": "5600"}):  # fmt: skip
        assert guard_rejects("POST", "/v1/completions", completions(kv)), kv


def test_incident_request_is_refused_and_routed_requests_pass() -> None:
    assert guard_rejects("POST", "/v1/completions", completions())
    assert guard_rejects("POST", "/v1/chat/completions", completions({}))
    assert not guard_rejects("POST", "/v1/completions", completions(ROUTED))
    marked = completions({"servekit_prompt_keyed": True})
    # issue 23 item 1: the marker is any client's to send; only prompt-keyed decoders take it
    assert guard_rejects("POST", "/v1/completions", marked)
    assert not guard_rejects("POST", "/v1/completions", marked, accept_prompt_keyed=True)
    assert not body_passes(marked, accept_prompt_keyed=False)
    assert body_passes(marked, accept_prompt_keyed=True)
    assert not guard_rejects("GET", "/health", b"")
    assert not guard_rejects("POST", "/tokenize", completions())


def test_unknown_generating_routes_and_non_json_bodies_fail_closed() -> None:
    for path in ("/v1/messages", "/invocations", "/inference/v1/generate", "/v1/new_thing"):
        assert guard_rejects("POST", path, completions()), path
        assert not guard_rejects("POST", path, completions(ROUTED)), path
    assert guard_rejects("POST", "/v1/completions", b"not json")
    assert guard_rejects("POST", "/v1/completions", b"[" * 100_000)  # RecursionError, no crash


def test_bodies_the_engine_would_parse_are_judged_like_the_engine_parses_them() -> None:
    plain = {"prompt": "hi", "max_tokens": 128}
    for encoded in (
        json.dumps(plain).encode("utf-16"),
        b"\xef\xbb\xbf" + json.dumps(plain).encode(),
        json.dumps(plain).encode("utf-32"),
    ):
        assert json.loads(encoded) == plain  # what FastAPI hands to vLLM
        assert guard_rejects("POST", "/v1/completions", encoded)
    twice = (
        b'{"kv_transfer_params": ' + json.dumps(ROUTED).encode() + b', "kv_transfer_params": {}}'
    )
    assert guard_rejects("POST", "/v1/completions", twice)  # json.loads keeps the last one


def test_error_body_carries_the_machine_readable_code() -> None:
    doc = json.loads(guard_error_body("/v1/completions"))
    assert doc["error"]["code"] == GUARD_ERROR_CODE
    assert doc["error"]["type"] == "invalid_request_error"
    assert "kv_transfer_params" in doc["error"]["message"]


def test_the_guard_is_one_standard_library_file_the_renderer_can_copy() -> None:
    assert source_path() == Path(servekit.guard.__file__).resolve()
    tree = ast.parse(source_bytes())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}  # fmt: skip
    imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module}  # fmt: skip
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
    assert middleware_target() == "servekit_decode_guard.DecodeGuardMiddleware"
    assert middleware_target("g") == "g.DecodeGuardMiddleware"
