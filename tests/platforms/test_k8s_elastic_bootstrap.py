"""``k8s.elastic=on`` in bootstrap mode (issue 41): the engine ids the proxy names are the
ones the prefill pods serve, on the fake cluster.

Layouts of vLLM's MooncakeConnector (the proxy tells the decoder the prefill's engine id
and bootstrap server) are rendered with ``k8s.elastic=on`` and started from their
manifests (:mod:`servekit.platforms.k8s.fake`: every pod runs the rendered ``pod.sh``, the
engines are ``servekit sim serve``). The simulated engines do across processes what
vLLM's connector does (:mod:`servekit.sim.protocols.bootstrap`): the prefill's bootstrap
server answers ``/query`` with the engine id of its command line (per DP rank
``<id>_dp<rank>``, as vLLM's engine core makes it), a decoder told an id that server does
not name fails the request, and a decoder keeps the worker address it learned for an id
and pulls from it, so a prefill made again under an id it met fails its pulls. Each test
has its positive control, failing for the reason it names:

- a scaled-up prefill: served under the rule's id and its pod's uid; a proxy naming the
  new prefill by its group index (the rule before the id rule) fails ("not found");
- a prefill pod deleted (``kubectl delete pod``: LWS makes it again, a new uid, a new
  side channel): requests after it are served under the new incarnation's id; the same
  cluster rendered with fixed ids (the rendering before this change) fails them
  ("transfer failed": the decoders pull from the old pod's address);
- a prefill of two external-DP ranks (a test fixture layout): served under
  ``<id>-<uid>_dp<rank>``; a proxy whose spec names the ranks without their DP rank
  (the plain id) fails ("not found").
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
    cluster: K8sDryCluster, api: FakeApi, spec: dict[str, Any], tmp: Path, n: int,
    engines: tuple[int, int] = (1, 2),
) -> list[tuple[int, str]]:  # fmt: skip
    """A second proxy on the same cluster, ``spec`` its discovery spec; what ``n``
    requests through it answered once it counts ``engines`` (prefill, decode) healthy."""
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
        while (pools["prefill"].healthy_count(), pools["decode"].healthy_count()) != engines:
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


def _spec(cluster: K8sDryCluster) -> dict[str, Any]:
    """The discovery spec the rendered proxy reads (its pod's mount)."""
    spec_file = next(cluster.root.glob(f"pods/sk-proxy-*/volumes/*/{elastic.SPEC_FILE}"))
    doc: dict[str, Any] = json.loads(spec_file.read_text())
    return doc


def _uid(cluster: K8sDryCluster, name: str) -> str:
    """The metadata.uid of the pod of that name now (the downward API's and the API's)."""
    assert cluster.elastic is not None
    return str(next((p.uid for p in cluster.elastic.run.pods_of["sk"] if p.name == name), ""))


def _decode_logs(cluster: K8sDryCluster) -> str:
    return "".join(p.read_text(errors="replace") for p in cluster.logs.glob("*decode*.log"))


def test_a_scaled_up_prefill_serves_under_the_engine_id_the_proxy_names(tmp_path: Path) -> None:
    model = _model(tmp_path / "tiny")
    with k8s_dry_cluster(
        LAYOUT, reference=False, sets=["k8s.elastic=on"], speed=50, ready_timeout_s=120,
        host_paths={"/workspace/.servekit/models/tiny": model},
    ) as cluster:  # fmt: skip
        lws = cluster.elastic
        assert lws is not None
        spec = _spec(cluster)
        prefill_role = next(r for r in spec["roles"] if r["role"] == "prefill")
        assert prefill_role["engine_id_from"] == "id_rule" and prefill_role["engine_id_pod_uid"]
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
        uid = _uid(cluster, "sk-prefill-1")
        served = f"{derived}-{uid}"  # pod.sh's number, then the pod's uid
        assert _get(new_prefill + "/sim/state")["engine_id"] == served

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
        assert served in named, named  # a decoder was told it, and its bootstrap server agreed

        api = lws.api
        good = _restricted(spec, {"engine_id_from": "id_rule", "engine_ids": rule})
        wrong = _restricted(spec, {"engine_id_from": "group_index"})  # the rule before
        right = asyncio.run(_control_proxy(cluster, api, good, tmp_path, 3))
        failed = asyncio.run(_control_proxy(cluster, api, wrong, tmp_path, 3))
        logs = _decode_logs(cluster)
    assert [s for s, _ in right] == [200] * 3, right
    assert all(s >= 500 for s, _ in failed), failed
    port = prefill_role["workers"][0]["endpoints"][0]["bootstrap_port"]
    server = url_for(address, int(port))
    reason = f"remote engine_id 1-{uid} not found from bootstrap server {server}"
    assert reason in logs, "the decoders never refused the wrong id"


def _replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_incarnation: bool
) -> tuple[list[tuple[int, str]], list[tuple[int, str]], tuple[str, str], str]:
    """The bootstrap layout, elastic, at 1p1d: requests through the rendered proxy before
    and after ``kubectl delete pod sk-prefill-0`` (LWS makes it again under its name: a
    new uid, a new process); the answers before and after, the engine ids the prefill
    served before and after, and the decoders' logs. ``per_incarnation=False`` renders
    the rule before this change: every incarnation of a pod serves its fixed id."""
    if not per_incarnation:
        monkeypatch.setattr(elastic, "incarnation_groups", lambda r: frozenset())
    # k8s.pool_wait=0: a request the one decoder failed is not held for another to come
    sets = ["k8s.elastic=on", "k8s.pool_wait=0"]
    with k8s_dry_cluster(
        LAYOUT, reference=False, sets=sets, speed=50, ready_timeout_s=120,
        host_paths={"/workspace/.servekit/models/tiny": _model(tmp_path / "tiny")},
    ) as cluster:  # fmt: skip
        lws = cluster.elastic
        assert lws is not None
        prefill = url_for(_pod(cluster, "sk-prefill-0"), PREFILL_PORT)
        served = [_get(prefill + "/sim/state")["engine_id"]]
        before = asyncio.run(_ask(cluster.entry_url, 3, "before"))  # the decoder meets it
        old_uid = _uid(cluster, "sk-prefill-0")
        lws.delete_pod("sk-prefill-0")

        def made_again() -> bool:  # the new pod, Ready, in the API under its own uid
            uid = _uid(cluster, "sk-prefill-0")
            pod = lws.api.pods.get("sk-prefill-0") or {}
            same = pod.get("metadata", {}).get("uid") == uid
            return uid not in ("", old_uid) and same and lws.api.is_ready("sk-prefill-0")

        _wait("the prefill made again", made_again)
        _wait("the rendered proxy admitted it again",
              lambda: _healthy(cluster.entry_url).get("prefill_instances") == 1)  # fmt: skip
        prefill = url_for(_pod(cluster, "sk-prefill-0"), PREFILL_PORT)
        served.append(_get(prefill + "/sim/state")["engine_id"])
        after = asyncio.run(_ask(cluster.entry_url, 3, "after"))
        logs = _decode_logs(cluster)
    return before, after, (served[0], served[1]), logs


def test_a_recreated_prefill_serves_under_an_id_of_its_own_a_fixed_id_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before, after, served, logs = _replaced(tmp_path / "uid", monkeypatch, per_incarnation=True)
    assert [s for s, _ in before + after] == [200] * 6, (before, after)
    assert "transfer failed" not in logs
    assert served[0] != served[1] and all(i.startswith("0-") for i in served), served
    # the control: the same cluster rendered with fixed ids, the same deletion
    before, after, served, logs = _replaced(tmp_path / "fixed", monkeypatch,
                                            per_incarnation=False)  # fmt: skip
    assert [s for s, _ in before] == [200] * 3, before
    assert served == ("0", "0")
    assert after and all(s >= 500 for s, _ in after), after
    assert "failed: transfer failed:" in logs, "the decoders never pulled from the old address"


DP_CATALOG = str(Path(__file__).parents[1] / "fixtures" / "bootstrap_dp")
DP_LAYOUT = "local/mooncake-dp2/1p1d"  # its prefill: two external-DP ranks on one pod


def test_dp_ranks_are_discovered_under_vllms_suffixed_ids(tmp_path: Path) -> None:
    """The rendered proxy names each rank ``<id>-<uid>_dp<rank>`` at its own bootstrap
    server, as each rank's engine serves it; a proxy whose spec names the ranks without
    their DP rank (the plain id, ``<id>-<uid>``) fails there (the control)."""
    with k8s_dry_cluster(
        DP_LAYOUT, catalog=DP_CATALOG, reference=False, sets=["k8s.elastic=on"], speed=50,
        ready_timeout_s=120,
        host_paths={"/workspace/.servekit/models/tiny": _model(tmp_path / "tiny")},
    ) as cluster:  # fmt: skip
        lws = cluster.elastic
        assert lws is not None
        spec = _spec(cluster)
        role = next(r for r in spec["roles"] if r["role"] == "prefill")
        ranks = role["workers"][0]["endpoints"]
        assert [(e["dp_rank"], e["bootstrap_port"]) for e in ranks] == [(0, 8998), (1, 8999)]
        uid = _uid(cluster, "sk-prefill-0")
        address = _pod(cluster, "sk-prefill-0")
        served = [_get(url_for(address, e["api_port"]) + "/sim/state")["engine_id"]
                  for e in ranks]  # fmt: skip
        assert served == [f"0-{uid}"] * 2  # each rank's command line; vLLM adds _dp<rank>
        urls = [url_for(address, e["api_port"]) for e in ranks]
        answers: list[tuple[int, str]] = []
        for _ in range(10):  # until both ranks have prefilled (bounded)
            answers += asyncio.run(_ask(cluster.entry_url, 4, f"round {len(answers)}"))
            if all(_tokens(u) > 0 for u in urls):
                break
        assert [s for s, _ in answers] == [200] * len(answers), answers
        assert all(_tokens(u) > 0 for u in urls), "a rank never prefilled"
        named = set(_get(url_for(_pod(cluster, "sk-decode-0"), DECODE_PORT) + "/sim/state")
                    ["remote_engines"])  # fmt: skip
        assert named == {f"0-{uid}_dp0", f"0-{uid}_dp1"}, named
        plain = json.loads(json.dumps(spec))
        for e in next(r for r in plain["roles"] if r["role"] == "prefill")["workers"][0][
                "endpoints"]:  # fmt: skip
            e.pop("dp_rank")
        failed = asyncio.run(_control_proxy(cluster, lws.api, plain, tmp_path, 4, (2, 1)))
        logs = _decode_logs(cluster)
    assert all(s >= 500 for s, _ in failed), failed
    assert f"remote engine_id 0-{uid} not found from bootstrap server" in logs
