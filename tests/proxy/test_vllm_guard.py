"""The guard middleware loaded into a real vLLM CPU server with --middleware."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from servekit.guard import GUARD_ERROR_CODE

MIDDLEWARE = "servekit.proxy.guard_middleware.DecodeGuardMiddleware"
READY_BOUND_S = 900


def call(url: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


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


@pytest.mark.vllm
def test_real_vllm_refuses_plain_generation_and_stays_healthy(tmp_path: Path) -> None:
    from servekit.local.tinymodel import build_tiny_model

    from .test_config import free_port

    model = tmp_path / "tiny"
    build_tiny_model(model)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", "256", "--middleware", MIDDLEWARE,
    ]  # fmt: skip
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "SERVEKIT_DECODE_GUARD": "on"}
    log = tmp_path / "vllm.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_ready(proc, url, log)
        plain = {"model": "tiny", "prompt": "hello", "max_tokens": 4}
        for path in ("/v1/completions", "/v1/chat/completions"):
            body = plain if path == "/v1/completions" else {
                "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4
            }  # fmt: skip
            status, raw = call(url + path, body)
            assert status == 400, raw
            assert json.loads(raw)["error"]["code"] == GUARD_ERROR_CODE
        assert call(url + "/health")[0] == 200
        assert call(url + "/v1/models")[0] == 200
        with_params = {**plain, "kv_transfer_params": {"do_remote_prefill": False}}
        status, raw = call(url + "/v1/completions", with_params)
        assert status == 200, raw
        assert json.loads(raw)["usage"]["completion_tokens"] == 4
        assert "decode guard: refused POST /v1/completions" in log.read_text()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
