"""A bootstrap-mode prefill of two external-DP ranks, rendered for Kubernetes (a fixed
list of backends: ``k8s.elastic`` off) and started from its manifests: the proxy names
each rank by the engine id vLLM gives it.

vLLM's engine core names each DP rank's KV engine ``<engine_id>_dp<rank>`` when
``data_parallel_size`` > 1, and under external load balancing each rank's engine runs
its own Mooncake bootstrap server (on ``VLLM_MOONCAKE_BOOTSTRAP_PORT``, which the Plan
gives each rank its own). The fixture layout ``local/mooncake-dp2/1p1d`` (the catalog's
``local/1p1d-mooncake`` with its prefill two external-DP ranks on one node; a test
fixture: vLLM refuses external DP for a dense model) runs on the fake cluster
(:mod:`servekit.platforms.k8s.fake`, the engines ``servekit sim serve``), whose
bootstrap servers answer what vLLM's do. Requests through the rendered proxy
(``--prefill-bootstrap 0_dp0=... 0_dp1=...``) are served by both ranks; the positive
control, a proxy on the same cluster naming the ranks by the plain id ``0`` (what the
Plan named before), fails every request there ("remote engine_id 0 not found").
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from servekit.catalog import load
from servekit.platforms.k8s.fake import k8s_dry_cluster
from servekit.proxy.config import parse_args
from servekit.proxy.server import start_proxy
from servekit.render import build_plan
from servekit.vocabulary import url_for
from servekit.vocabulary.metrics import PROMPT_TOKENS

pytestmark = pytest.mark.slow

CATALOG = str(Path(__file__).parents[1] / "fixtures" / "bootstrap_dp")
NAME = "local/mooncake-dp2/1p1d"
MODEL = "tiny-llama"


async def _ask(target: str, n: int, tag: str) -> list[int]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        out = []
        for i in range(n):
            body = {"model": MODEL, "prompt": f"{tag} {i}: a rank of its own", "max_tokens": 4,
                    "temperature": 0}  # fmt: skip
            async with session.post(target + "/v1/completions", json=body) as r:
                out.append(r.status)
        return out


async def _prompt_tokens(engine: str) -> float:
    async with aiohttp.ClientSession() as session, session.get(engine + "/metrics") as r:
        text = await r.text()
    return sum(s.value for f in text_string_to_metric_families(text) if f.name == PROMPT_TOKENS
               for s in f.samples if s.name.endswith("_total"))  # fmt: skip


async def _control(prefills: list[str], servers: list[str], decode: str, n: int) -> list[int]:
    """A proxy naming each rank by the plain engine id; what ``n`` requests answered."""
    argv = ["--mode", "bootstrap", "--port", "0", "--prefill", *prefills, "--decode", decode,
            "--prefill-bootstrap", *(f"0={s}" for s in servers), "--retry-backoff", "0",
            "--health-interval", "0.2"]  # fmt: skip
    proxy = await start_proxy(parse_args(argv))
    try:
        while not all(i.routable for i in proxy.router.instances()):
            await asyncio.sleep(0.1)
        return await _ask(proxy.url, n, "control")
    finally:
        await proxy.stop()


def _model(folder: Path) -> Path:
    """What the preflight and the simulated vLLM need of the tiny model: its files."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    return folder


def test_each_external_dp_rank_is_named_by_its_suffixed_engine_id(tmp_path: Path) -> None:
    with k8s_dry_cluster(
        NAME, catalog=CATALOG, reference=False, speed=50, ready_timeout_s=120,
        host_paths={"/workspace/.servekit/models/tiny": _model(tmp_path / "tiny")},
    ) as cluster:  # fmt: skip
        assert cluster.pods is not None
        plan = build_plan(load(NAME, CATALOG).layout)
        wiring = plan.process("proxy").proxy
        assert wiring is not None
        assert [b.engine_id for b in wiring.bootstrap] == ["0_dp0", "0_dp1"]
        prefill, decode = cluster.pods["sk-prefill-0"], cluster.pods["sk-decode-0"]
        prefills = [url_for(prefill, a.port) for a in wiring.prefill]
        servers = [url_for(prefill, b.server.port) for b in wiring.bootstrap]
        assert len(set(servers)) == 2  # each rank its own bootstrap server
        answers: list[int] = []
        for _ in range(10):  # until both ranks have prefilled (bounded)
            answers += asyncio.run(_ask(cluster.entry_url, 4, f"round {len(answers)}"))
            if all(asyncio.run(_prompt_tokens(p)) > 0 for p in prefills):
                break
        assert answers == [200] * len(answers), answers
        assert all(asyncio.run(_prompt_tokens(p)) > 0 for p in prefills), "a rank never served"
        engine = url_for(decode, wiring.decode[0].port)
        failed = asyncio.run(_control(prefills, servers, engine, 4))
        logs = "".join(p.read_text(errors="replace") for p in cluster.logs.glob("*decode*.log"))
    assert failed and all(s >= 500 for s in failed), failed
    assert "remote engine_id 0 not found from bootstrap server" in logs
