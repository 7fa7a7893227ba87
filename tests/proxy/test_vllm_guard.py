"""The guard file loaded into a real vLLM CPU server with --middleware, via PYTHONPATH.

The file is what the renderer ships (``servekit.guard.source_bytes()``), copied
as ``servekit_decode_guard.py``; the routes it guards come from vLLM's router.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from servekit.guard import GUARD_ERROR_CODE, RENDERED_MODULE, middleware_target, source_bytes

READY_BOUND_S = 900
ROUTED = {
    "do_remote_prefill": True, "remote_block_ids": [[1]], "remote_engine_id": "p",
    "remote_request_id": "r", "remote_host": "127.0.0.1", "remote_port": 1,
}  # fmt: skip


def call(url: str, body: dict[str, Any] | None = None) -> tuple[int, bytes, dict[str, str]]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + READY_BOUND_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"vLLM exited early:\n{log.read_text()[-4000:]}")
        try:
            if call(url + "/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(1)
    raise AssertionError(f"vLLM never became healthy:\n{log.read_text()[-4000:]}")


def check_guarded_routes(url: str, report: dict[str, Any]) -> None:
    """Every POST route the guard names refuses a plain body; allow-listed ones do not."""
    assert report["routes_from"] == "router" and report["state"] == "strict"
    guarded = [r.split(" ", 1)[1] for r in report["guarded"] if r.startswith("POST ")]
    assert {"/v1/completions", "/v1/chat/completions", "/v1/responses"} <= set(guarded)
    for path in guarded:
        concrete = re.sub(r"\{[^}]+\}", "x", path)
        status, raw, _ = call(url + concrete, {"model": "tiny", "prompt": "hello"})
        assert status == 400 and json.loads(raw)["error"]["code"] == GUARD_ERROR_CODE, path
    assert call(url + "/tokenize", {"model": "tiny", "prompt": "hello"})[0] == 200


@pytest.mark.vllm
def test_real_vllm_loads_the_guard_file_and_refuses_what_would_prefill(tmp_path: Path) -> None:
    from servekit.local import companions
    from servekit.local.tinymodel import build_tiny_model

    from .test_config import free_port

    model = tmp_path / "tiny"
    build_tiny_model(model)
    (tmp_path / "guard").mkdir()
    (tmp_path / "guard" / f"{RENDERED_MODULE}.py").write_bytes(source_bytes())
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", "256", "--middleware", middleware_target(),
    ]  # fmt: skip
    # As servekit starts engines: torch companions that cannot load stay hidden.
    hidden = companions.engine_env(companions.find_broken(), str(tmp_path / "guard"))
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "PYTHONPATH": str(tmp_path / "guard"),
        **hidden,
    }
    log = tmp_path / "vllm.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_ready(proc, url, log)
        status, raw, headers = call(url + "/health")
        assert status == 200 and headers["x-servekit-decode-guard"] == "strict"  # the default
        check_guarded_routes(url, json.loads(raw)["decode_guard"])
        plain = {"model": "tiny", "prompt": "hello", "max_tokens": 4}
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        for path, body in (("/v1/completions", plain), ("/v1/chat/completions", chat)):
            for kv in (None, {"do_remote_prefill": False}, {"foo": 1}):
                doc = body if kv is None else {**body, "kv_transfer_params": kv}
                status, raw, _ = call(url + path, doc)
                assert status == 400 and json.loads(raw)["error"]["code"] == GUARD_ERROR_CODE
        assert call(url + "/health")[0] == 200
        assert call(url + "/v1/models")[0] == 200
        # strict (no SERVEKIT_DECODE_GUARD): a client-sent prompt-keyed marker is refused
        marker = {**plain, "kv_transfer_params": {"servekit_prompt_keyed": True}}
        status, raw, _ = call(url + "/v1/completions", marker)
        assert status == 400 and json.loads(raw)["error"]["code"] == GUARD_ERROR_CODE
        # no connector here: vLLM ignores the routed params, and answers
        status, raw, _ = call(url + "/v1/completions", {**plain, "kv_transfer_params": ROUTED})
        assert status == 200, raw
        assert json.loads(raw)["usage"]["completion_tokens"] == 4
        text = log.read_text()
        assert "decode guard: refused POST /v1/completions" in text
        assert "guarded routes (router)" in text
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
