"""``k8s.elastic=on`` in bootstrap mode (issue 41): a scaled-up prefill serves under the
engine id the proxy names, on the fake cluster.

``local/1p1d-mooncake`` (vLLM's MooncakeConnector: the proxy tells the decoder the
prefill's engine id and bootstrap server) is rendered with ``k8s.elastic=on`` and
started from its manifests (:mod:`servekit.platforms.k8s.fake`: every pod runs the
rendered ``pod.sh``, the engines are ``servekit sim serve``), then both
LeaderWorkerSets are scaled to 2. The simulated engines do across processes what
vLLM's connector does: the prefill's bootstrap server answers ``/query`` with the
engine id on its own command line (for group index 1: the one ``pod.sh`` derived),
and a decoder told an id that server does not name fails the request
(:mod:`servekit.sim.protocols.bootstrap`). So requests served by the new prefill
through the rendered proxy show that the id the proxy names (the discovery spec's
rule) is the id the pod serves (``pod.sh``'s number); the positive control is a proxy
on the same cluster whose spec names the new prefill by its group index, the rule
before this change: every request it sends there fails, for that reason.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from servekit.platforms.k8s import elastic
from servekit.platforms.k8s.fake import K8sDryCluster, k8s_dry_cluster
from servekit.platforms.k8s.fakeapi import FakeApi
from servekit.proxy import spec_from_doc
from servekit.proxy.config import parse_args
from servekit.proxy.kube import GROUP_INDEX
from servekit.proxy.server import start_proxy
from servekit.vocabulary import url_for
from servekit.vocabulary.metrics import GENERATION_TOKENS, PROMPT_TOKENS

pytestmark = pytest.mark.slow

LAYOUT = "local/1p1d-mooncake"
MODEL = "tiny-llama"
PREFILL_PORT, DECODE_PORT = 8100, 8101  # the layout's API ports (every pod of a group: the same)


def _model(folder: Path) -> Path:
    """What the preflight and the simulated vLLM need of the tiny model: its files."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    return folder


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read(1 << 20))


def _tokens(url: str) -> float:
    """Prompt plus generated tokens an engine processed (its own ``/metrics``)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read(4 << 20).decode()
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        if f.name in (PROMPT_TOKENS, GENERATION_TOKENS)
        for s in f.samples
        if s.name.endswith("_total")
    )


async def _ask(url: str, n: int, tag: str) -> list[tuple[int, str]]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def one(i: int) -> tuple[int, str]:
            body = {"model": MODEL, "prompt": f"{tag} {i}: the quick brown fox", "max_tokens": 4,
                    "temperature": 0}  # fmt: skip
            async with session.post(url + "/v1/completions", json=body) as r:
                return r.status, (await r.text())[:300]

        return [await one(i) for i in range(n)]


def _wait(what: str, cond: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.2)


def _healthy(url: str) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = _get(url + "/health")
    except OSError:
        return {}
    return doc


def _pod(cluster: K8sDryCluster, name: str) -> str:
    assert cluster.elastic is not None
    return next(p.address for p in cluster.elastic.run.pods_of["sk"] if p.name == name)


async def _control_proxy(
    cluster: K8sDryCluster, api: FakeApi, spec: dict[str, Any], tmp: Path, n: int
) -> list[tuple[int, str]]:
    """A second proxy on the same cluster, its prefill role only group index 1 (the new
    prefill), ``spec`` its discovery spec; what ``n`` requests through it answered."""
    path = tmp / "spec.json"
    path.write_text(json.dumps(spec))
    token = cluster.root / "serviceaccount" / "token"
    config = parse_args(["--mode", "bootstrap", "--port", "0", "--discovery", "kubernetes",
                         "--discovery-spec", str(path), "--kube-api", api.url,
                         "--kube-token-file", str(token), "--health-interval", "0.2",
                         "--retry-backoff", "0"])  # fmt: skip
    proxy = await start_proxy(config)
    pools = proxy.router.pools
    try:
        deadline = time.monotonic() + 30
        while (pools["prefill"].healthy_count(), pools["decode"].healthy_count()) != (1, 2):
            assert time.monotonic() < deadline, "the control proxy never admitted the engines"
            await asyncio.sleep(0.2)
        return await _ask(proxy.url, n, "control")
    finally:
        await proxy.stop()


def _restricted(spec: dict[str, Any], rule: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with its prefill role narrowed to group index 1 and its id fields ``rule``."""
    out = json.loads(json.dumps(spec))
    prefill = next(r for r in out["roles"] if r["role"] == "prefill")
    prefill["selector"][GROUP_INDEX] = "1"
    for key in ("engine_id_from", "engine_ids"):
        prefill.pop(key, None)
    prefill.update(rule)
    return out


def test_a_scaled_up_prefill_serves_under_the_engine_id_the_proxy_names(tmp_path: Path) -> None:
    model = _model(tmp_path / "tiny")
    with k8s_dry_cluster(
        LAYOUT, reference=False, sets=["k8s.elastic=on"], speed=50, ready_timeout_s=120,
        host_paths={"/workspace/.servekit/models/tiny": model},
    ) as cluster:  # fmt: skip
        lws = cluster.elastic
        assert lws is not None
        spec_file = next(cluster.root.glob(f"pods/sk-proxy-*/volumes/*/{elastic.SPEC_FILE}"))
        spec = json.loads(spec_file.read_text())
        prefill_role = next(r for r in spec["roles"] if r["role"] == "prefill")
        assert prefill_role["engine_id_from"] == "id_rule" and prefill_role["bootstrap_port"]
        rule = prefill_role["engine_ids"]
        parsed = next(r for r in spec_from_doc(spec).roles if r.role == "prefill").engine_ids
        assert parsed is not None
        derived = parsed.engine_id(1)  # what the rendered proxy names group index 1
        assert derived is not None and derived != "1"  # so the control below differs

        lws.scale("sk-prefill", 2)
        lws.scale("sk-decode", 2)
        _wait(
            "both groups of both roles ready",
            lambda: lws.ready_groups("sk-prefill") == 2 and lws.ready_groups("sk-decode") == 2,
        )
        _wait("the rendered proxy admitted the new engines", lambda: (
            _healthy(cluster.entry_url).get("prefill_instances"),
            _healthy(cluster.entry_url).get("decode_instances")) == (2, 2))  # fmt: skip
        address = _pod(cluster, "sk-prefill-1")
        new_prefill = url_for(address, PREFILL_PORT)
        new_decode = url_for(_pod(cluster, "sk-decode-1"), DECODE_PORT)
        assert _get(new_prefill + "/sim/state")["engine_id"] == derived  # pod.sh's number

        # through the rendered proxy, until the new prefill has served (bounded)
        answers: list[tuple[int, str]] = []
        for _ in range(10):
            answers += asyncio.run(_ask(cluster.entry_url, 4, f"round {len(answers)}"))
            if _tokens(new_prefill) > 0 and _tokens(new_decode) > 0:
                break
        assert [s for s, _ in answers] == [200] * len(answers), answers
        assert _tokens(new_prefill) > 0 and _tokens(new_decode) > 0, "new engines never served"
        named = {e for d in ("sk-decode-0", "sk-decode-1")
                 for e in _get(url_for(_pod(cluster, d), DECODE_PORT) + "/sim/state")
                 ["remote_engines"]}  # fmt: skip
        assert derived in named, named  # a decoder was told it, and its bootstrap server agreed

        api = lws.api
        good = _restricted(spec, {"engine_id_from": "id_rule", "engine_ids": rule})
        wrong = _restricted(spec, {"engine_id_from": "group_index"})  # the rule before
        right = asyncio.run(_control_proxy(cluster, api, good, tmp_path, 3))
        failed = asyncio.run(_control_proxy(cluster, api, wrong, tmp_path, 3))
        logs = "".join(p.read_text(errors="replace") for p in cluster.logs.glob("*decode*.log"))
    assert [s for s, _ in right] == [200] * 3, right
    assert all(s >= 500 for s, _ in failed), failed
    server = url_for(address, int(prefill_role["bootstrap_port"]))
    reason = f"remote engine_id 1 not found from bootstrap server {server}"
    assert reason in logs, "the decoders never refused the wrong id"
