"""``local/1p1d`` rendered for Kubernetes, run on the fake cluster with real vLLM on the CPU.

The same manifests as any layout (a prefill LeaderWorkerSet, a decode one, the
proxy's Deployment and Service) started by :mod:`servekit.platforms.k8s.fake`:
each pod on its own loopback address, the prefill's NIXL side channel on its pod
IP (the rendering's loopback change), the proxy finding both engines by their
pod names, the tiny model mounted from the node's folder at
``/workspace/.servekit/models/tiny`` (the container's working folder, as the layout's
relative model path needs). Answers come through the proxy, as from ``servekit up local/1p1d``.
One real-engine start (about two minutes on two cores); marker ``vllm``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from servekit.client import OpenAIClient
from servekit.local.tinymodel import build_tiny_model
from servekit.platforms import k8s_dry_cluster, leftovers

pytestmark = pytest.mark.vllm
READY_TIMEOUT_S = 900.0


async def _complete(url: str, prompt: str) -> tuple[str, int | None]:
    async with OpenAIClient(url, model="tiny-llama") as client:
        rec = await client.completion({"prompt": prompt, "max_tokens": 16, "temperature": 0})
    assert rec.ok, rec.error
    return rec.text, rec.usage.completion_tokens if rec.usage else None


def test_local_1p1d_on_the_fake_cluster_answers_through_its_proxy(tmp_path: Path) -> None:
    build_tiny_model(tmp_path / ".servekit/models/tiny")
    started = time.perf_counter()
    model = {"/workspace/.servekit/models/tiny": tmp_path / ".servekit/models/tiny"}
    with k8s_dry_cluster(
        "local/1p1d",
        engine="vllm",
        reference=False,
        host_paths=model,
        ready_timeout_s=READY_TIMEOUT_S,
    ) as cluster:
        assert len(cluster.pods_arg.split(",")) == 2  # a prefill pod and a decode pod
        prompt = "The quick brown fox jumps over the lazy dog " * 8
        first = asyncio.run(_complete(cluster.entry_url, prompt))
        again = asyncio.run(_complete(cluster.entry_url, prompt))
        logs = {p.name: p.read_text(errors="replace") for p in cluster.logs.glob("*.log")}
        ready_s = cluster.started_s
    took = time.perf_counter() - started
    assert first[0] and first[1] == 16
    assert again == first  # greedy: the same answer through prefill + decode
    assert "prefill.log" in logs and "decode.log" in logs
    assert leftovers(cluster) == [] and not cluster.root.exists()
    print(f"local/1p1d on the fake k8s cluster: ready in {ready_s:.0f} s, {took:.0f} s in all")
