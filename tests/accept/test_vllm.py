"""`servekit accept` against real vLLM CPU engines started by `servekit up`.

Slow (each layout takes a minute or two to start on the CPU), so marked vllm.
The tiny model cannot retrieve needles, so it declares no retrieval; one run
declares it anyway to show calibration against vLLM's real /tokenize and the
judge rejecting a real model's non-answers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.cli import servekit_cli
from tests.helpers.engines import SharedRuns

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def checks(out: Path) -> dict[str, dict[str, Any]]:
    doc = json.loads((out / "result.json").read_text())
    return {c["id"]: c for c in doc["checks"]}


MUST_PASS_SINGLE = (
    "service.health",
    "service.models",
    "service.error_logs",
    "api.sse",
    "api.finish_reason",
    "api.usage",
    "api.chat_completions",
    "invariant.prefix_hot_cold",
    "invariant.stream_equals_nonstream",
    "invariant.concurrent_equals_serial",
    "invariant.long_beside_short",
)


def test_single_instance_passes_service_api_and_invariants(shared_vllm: SharedRuns) -> None:
    env, workdir = shared_vllm.up("local/single"), shared_vllm.root
    plain = servekit_cli("accept", "--target", "local/single", "--context", "2k",
                         "--out", "plain", cwd=workdir, env=env, timeout=900)  # fmt: skip
    needles = servekit_cli("accept", "--target", "local/single", "--context", "2k",
                           "--capability", "retrieval", "--only", "needle.2k.A",
                           "--only", "needle.2k.turn1", "--out", "needles",
                           cwd=workdir, env=env, timeout=900)  # fmt: skip
    assert plain.returncode == 0, plain.stdout + plain.stderr
    found = checks(workdir / "plain")
    for check in MUST_PASS_SINGLE:
        assert found[check]["verdict"] == "pass", (check, found[check]["reason"])
    assert found["guard.decode_direct"]["verdict"] == "skip"
    assert all(
        c["verdict"] == "skip" and "retrieval" in c["reason"]
        for k, c in found.items()
        if k.startswith("needle.")
    )
    # calibration with vLLM's own /tokenize lands within max(128, N/200) of the target
    judged = checks(workdir / "needles")
    for check in ("needle.2k.A", "needle.2k.turn1"):
        m = judged[check]["measurements"]
        assert abs(m["prompt_tokens"] - m["target_tokens"]) <= 128, m
        assert judged[check]["verdict"] in ("pass", "fail")
    assert needles.returncode in (0, 1)


def test_real_1p1d_passes_guard_service_and_api(shared_vllm: SharedRuns) -> None:
    env, workdir = shared_vllm.up("local/1p1d"), shared_vllm.root
    proc = servekit_cli("accept", "--target", "local/1p1d", "--context", "2k",
                        "--only", "service", "--only", "guard", "--only", "api",
                        "--out", "pd", cwd=workdir, env=env, timeout=900)  # fmt: skip
    guard = checks(workdir / "pd")["guard.decode_direct"]
    assert guard["verdict"] == "pass", guard["reason"]
    assert proc.returncode == 0, proc.stdout
