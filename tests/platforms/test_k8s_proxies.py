"""Several proxies on Kubernetes (issue 41, deliverable 6): ``k8s.proxy_replicas`` proxy
pods of ``k8s.proxy_workers`` processes each.

The rendering: the Deployment's replicas, the proxy's ``--workers``, and autoscalers that
add up the pods' needs instead of N desired counts. Then the way it runs: the rendered
manifests on the fake cluster (simulated engines), whose headless Service answers with
every proxy pod's address as cluster DNS does, so a leaving decoder's preStop hook has
both proxy pods drain it, while a proxy pod killed mid-stream takes only its own streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from hypothesis import given, settings, strategies as st
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from tests.platforms.k8s_schemas import problems
from tests.platforms.rendered import CATALOG, files

from servekit.errors import UsageError
from servekit.local import proctree
from servekit.platforms.k8s import elastic
from servekit.platforms.k8s.fake import K8sDryCluster, k8s_dry_cluster
from servekit.platforms.k8s.fakelws import Autoscaler, ScaleTarget, scale_targets
from servekit.platforms.k8s.settings import parse_settings
from servekit.proxy.config import parse_args

PD = "a3/dsv41-ced-pd"  # one prefill and one decode engine, one process each
LAYERWISE = "a3/qwen3.5-397b-a17b/1p1x2d"
NO_PROXY = "a3/dsv41-tp8"
SEVERAL = (("proxy_replicas", "2"), ("proxy_workers", "2"))
WORKERS = 2
TOKENS = 160  # a stream of about 3 s on the simulated decoder: it outlives the hook


def _objects(name: str, pairs: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path, text in files(name, "leaderworkerset", pairs).items():
        if path.endswith(".yaml") and path != "kustomization.yaml":
            assert isinstance(text, str)
            out += [o for o in yaml.load_all(text, Loader=yaml.CSafeLoader) if o]
    return out


def _proxy_argv(objs: list[dict[str, Any]], folder: Path) -> list[str]:
    """The proxy's argv as its pod runs it: its ConfigMap's proxy.sh under DRY_RUN."""
    folder.mkdir(parents=True, exist_ok=True)
    for o in objs:
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("sk-proxy-scripts"):
            for key, value in (o.get("data") or {}).items():
                (folder / key).write_text(value)
    env = {"PATH": os.environ["PATH"], "POD_IP": "10.0.0.2", "DRY_RUN": "1",
           "BUNDLE_DIR": str(folder)}  # fmt: skip
    out = subprocess.run(["sh", str(folder / "proxy.sh")], env=env, text=True,
                         capture_output=True, check=True).stdout.split("\n")  # fmt: skip
    return [w for w in out if w][2:]


def test_the_deployment_runs_that_many_pods_of_that_many_workers(tmp_path: Path) -> None:
    """Static and elastic alike: replicas, ``--workers`` in the argv the proxy parses,
    the change recorded with its reason, the objects valid; the defaults unchanged."""
    os.environ.setdefault(elastic.ADMIN_KEY_ENV, "test")
    for extra in ((), (("elastic", "on"),)):
        objs = _objects(PD, (*SEVERAL, *extra))
        deployment = next(o for o in objs if o["kind"] == "Deployment")
        assert deployment["spec"]["replicas"] == 2
        assert all(problems(o) == [] for o in objs if o["kind"] in ("Deployment", "Service"))
        argv = _proxy_argv(objs, tmp_path / f"proxy{len(extra)}")
        assert argv[-2:] == ["--workers", "2"]
        assert parse_args(argv, read_keys=False).workers == 2
        summary = str(files(PD, "leaderworkerset", (*SEVERAL, *extra))["k8s.md"])
        assert "- proxy: 2 pods (Deployment replicas) of 2 processes (--workers)" in summary
        assert "1 x workers: k8s.proxy_workers" in summary
    plain = _objects(PD, ())
    assert next(o for o in plain if o["kind"] == "Deployment")["spec"]["replicas"] == 1
    assert "--workers" not in _proxy_argv(plain, tmp_path / "plain")


def _triggers(pairs: tuple[tuple[str, str], ...]) -> dict[str, list[dict[str, Any]]]:
    return {o["metadata"]["name"]: o["spec"]["triggers"]
            for o in _objects(PD, pairs) if o["kind"] == "ScaledObject"}  # fmt: skip


def test_several_proxy_pods_are_autoscaled_on_their_summed_need() -> None:
    """KEDA: the pods' needs added up, and the largest desired count (never a sum);
    the HPA (which adds up every series it gets): every process's need. One pod: as
    before. Each passes KEDA's CRD schema or Kubernetes' HPA schema."""
    keda = (("elastic", "on"), ("autoscale", "keda"))
    one = _triggers(keda)["sk-decode"]
    assert [t["metadata"]["query"] for t in one] == [
        'max(servekit_desired_replicas{role="decode",pod=~"sk-proxy-.*"})'
    ]
    assert _triggers((*keda, ("proxy_workers", "2")))["sk-decode"] == one  # any worker: the pod's
    several = _triggers((*keda, *SEVERAL))["sk-decode"]
    assert [(t["name"], t["metadata"]["query"], t["metadata"]["threshold"]) for t in several] == [
        ("need", 'ceil(sum(servekit_autoscale_need{role="decode",pod=~"sk-proxy-.*"}))', "1"),
        ("desired", 'max(servekit_desired_replicas{role="decode",pod=~"sk-proxy-.*"})', "1"),
    ]
    for o in _objects(PD, (*keda, *SEVERAL)):
        if o["kind"] == "ScaledObject":
            assert problems(o) == []
    hpa = (("elastic", "on"), ("autoscale", "hpa"))
    for pairs, metric in (((), "servekit_desired_replicas"),
                          ((("proxy_workers", "2"),), "servekit_autoscale_need"),
                          ((("proxy_replicas", "3"),), "servekit_autoscale_need")):  # fmt: skip
        hpas = [o for o in _objects(PD, (*hpa, *pairs)) if o["kind"] == "HorizontalPodAutoscaler"]
        assert len(hpas) == 2
        for o in hpas:
            assert problems(o) == []
            assert o["spec"]["metrics"][0]["external"]["metric"]["name"] == metric


def _page(pod_values: dict[str, float], desired: int) -> list[Sample]:
    """A proxy pod's samples: each worker's need and desired count for decode."""
    text = "".join(
        f'servekit_autoscale_need{{role="decode",why="load",proxy_worker="{w}"}} {v}\n'
        f'servekit_desired_replicas{{role="decode",proxy_worker="{w}"}} {desired}\n'
        for w, v in pod_values.items()
    )
    return [s for f in text_string_to_metric_families(text) for s in f.samples]


def _target(pairs: tuple[tuple[str, str], ...]) -> ScaleTarget:
    objs = _objects(PD, (("elastic", "on"), *pairs))
    return next(t for t in scale_targets(objs) if t.role == "decode")


def test_the_emulated_autoscaler_reads_every_proxy_pod_as_the_query_does() -> None:
    """Two proxy pods of two workers, needs 1.3 + 0.4 and 1.2 (2.9 in all), each pod's
    desired count 2 (its own share): KEDA's two triggers ask for 3, the HPA's summed
    need 2.9 (it rounds up to 3); a pod the query's ``pod=~`` leaves out counts for
    nothing. Controls: one pod's desired count alone asks for 2 (too few), and the
    HPA's sum of desired counts 8 (every worker's series of every pod)."""
    pages = {
        "sk-proxy-7d9c-a": _page({"0": 1.3, "1": 0.4}, 2),
        "sk-proxy-7d9c-b": _page({"0": 1.2, "1": 0.0}, 2),
        "sk-decode-0": _page({"0": 50.0}, 50),
    }
    several = (("autoscale", "keda"), *SEVERAL)
    keda = _target(several)
    assert [r.value(pages) for r in keda.readings] == [3.0, 2.0]
    assert keda.metric(pages) == 3.0
    hpa = _target((("autoscale", "hpa"), *SEVERAL))
    proxies = {k: v for k, v in pages.items() if k.startswith("sk-proxy")}
    assert hpa.metric(proxies) == pytest.approx(2.9)
    single = _target((("autoscale", "keda"),))
    assert single.metric(pages) == 2.0  # the control: one pod's count, not the role's
    single_hpa = _target((("autoscale", "hpa"),))
    assert single_hpa.metric(proxies) == 8.0  # the control: the HPA adds desired counts up


@pytest.mark.parametrize(
    ("name", "pairs", "says"),
    [
        (PD, (("proxy_workers", "3"),), "k8s.proxy_cpu=2 gives 2 whole cores"),
        (PD, (("proxy_workers", "2"), ("proxy_cpu", "1500m")), "gives 1 whole core;"),
        (PD, (("proxy_replicas", "0"),), "k8s.proxy_replicas='0': give a count from 1 to 64"),
        (PD, (("proxy_workers", "65"), ("proxy_cpu", "96")), "from 1 to 64"),
        (NO_PROXY, (("proxy_replicas", "2"),), "this layout has no proxy"),
        (LAYERWISE, (("proxy_workers", "2"),), "a layerwise proxy waits for each decoder"),
        (LAYERWISE, (("proxy_replicas", "2"),), "a layerwise proxy waits for each decoder"),
    ],
)
def test_what_several_proxies_cannot_do_is_refused_in_one_line(
    name: str, pairs: tuple[tuple[str, str], ...], says: str
) -> None:
    with pytest.raises(UsageError) as caught:
        files(name, "leaderworkerset", pairs)
    assert says in str(caught.value) and "\n" not in str(caught.value)
    assert "k8s.proxy_" in str(caught.value)


def test_workers_up_to_the_pods_whole_cores_are_taken() -> None:
    o = parse_settings({"proxy_workers": "4", "proxy_cpu": "4500m", "proxy_replicas": "3"},
                       CATALOG[PD])  # fmt: skip
    assert (o.proxy_workers, o.proxy_replicas) == (4, 3)
    assert parse_settings({"proxy_cpu": "500m"}, CATALOG[PD]).proxy_workers == 1


@settings(max_examples=150, deadline=None)
@given(
    key=st.sampled_from(["proxy_replicas", "proxy_workers"]),
    value=st.text(max_size=40),
    cpu=st.sampled_from(["2", "500m", "8", "1.5", "64"]),
)
def test_any_proxy_count_text_parses_or_is_refused_in_one_line(
    key: str, value: str, cpu: str
) -> None:
    try:
        o = parse_settings({key: value, "proxy_cpu": cpu}, CATALOG[PD])
    except UsageError as e:
        assert f"k8s.{key}" in str(e) and "\n" not in str(e)
    else:
        assert 1 <= getattr(o, key) <= 64


# --- on the fake cluster ---------------------------------------------------------------

_MODEL = ["?"]  # the served model's name, read from the proxy once the cluster runs


def _model(url: str) -> str:
    with urllib.request.urlopen(f"{url}/v1/models", timeout=10) as r:
        return str(json.loads(r.read())["data"][0]["id"])


async def _stream(session: aiohttp.ClientSession, url: str, i: int, tokens: int) -> str:
    """One greedy streamed completion: "" when it ended with [DONE], else what went wrong."""
    body = {"model": _MODEL[0], "prompt": f"request {i}: the proxies share nothing",
            "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "stream": True}  # fmt: skip
    try:
        async with session.post(f"{url}/v1/completions", json=body) as resp:
            if resp.status != 200:
                return f"HTTP {resp.status}"
            async for raw in resp.content:
                line = raw.strip()
                if line == b"data: [DONE]":
                    return ""
                if line.startswith(b"data: ") and b'"error"' in line:
                    return line.decode(errors="replace")[:200]
            return "ended without [DONE]"
    except (aiohttp.ClientError, TimeoutError) as e:
        return f"{type(e).__name__}: {e}"


def _samples(url: str, name: str) -> list[tuple[dict[str, str], float]]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read(8 << 20).decode("utf-8", "replace")
    return [(s.labels, s.value) for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == name]  # fmt: skip


def _decoding(url: str) -> dict[str, float]:
    """Decode instance -> the streams this proxy pod (every worker) has on it."""
    out: dict[str, float] = {}
    for labels, value in _samples(url, "servekit_proxy_inflight_requests"):
        if labels["role"] == "decode":
            out[labels["instance"]] = out.get(labels["instance"], 0.0) + value
    return out


def _on_every_decoder(urls: list[str], decoders: int, timeout_s: float = 10.0) -> None:
    """Until each proxy pod has a stream on each of the ``decoders`` (the leaving one too)."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = {u: _decoding(u) for u in urls}
        if all(sum(1 for v in s.values() if v > 0) >= decoders for s in seen.values()):
            return
        assert time.monotonic() < deadline, f"streams not on every decoder: {seen}"
        time.sleep(0.2)


def _counts(url: str, name: str, **match: str) -> float:
    return sum(v for labels, v in _samples(url, name)
               if all(labels.get(k) == x for k, x in match.items()))  # fmt: skip


def _wait_decoders(cluster: K8sDryCluster, n: int) -> None:
    e = cluster.elastic
    assert e is not None
    deadline = time.monotonic() + 120
    while e.ready_groups("sk-decode") < n:
        assert time.monotonic() < deadline, "decoders not ready"
        time.sleep(0.3)
    for url in cluster.proxies.values():  # each proxy probed the new engine
        while _counts(url, "servekit_proxy_instance_healthy", role="decode") < n * WORKERS:
            assert time.monotonic() < deadline, f"{url}: decoders not healthy"
            time.sleep(0.3)


def _on_leaving(url: str) -> float:
    """The streams this proxy pod (every worker) has on instances it is draining."""
    draining = {(labels.get("proxy_worker"), labels["instance"])
                for labels, v in _samples(url, "servekit_proxy_instance_draining") if v > 0}  # fmt: skip
    return sum(v for labels, v in _samples(url, "servekit_proxy_inflight_requests")
               if (labels.get("proxy_worker"), labels["instance"]) in draining)  # fmt: skip


@dataclass
class ScaleDown:
    """A decode scale-down under streams, as each proxy pod and the leaving pod saw it."""

    fates: list[str]
    """Each stream: "" (it ended with [DONE]) or what went wrong."""
    hook: str
    """The leaving pod's preStop hook's output."""
    drains: dict[str, float]
    """Per proxy pod: its decode drains (every worker's) during the scale-down."""
    failed: dict[str, float]
    """Per proxy pod: streams whose decoder failed mid-answer during it."""
    after_hook: dict[str, list[float]]
    """Per proxy pod: its streams on the leaving decoder in each sample read once the
    hook had ended (then the kubelet's SIGTERM: the engine cuts them there, vLLM and the
    simulator alike, and the proxy carries them on elsewhere: ``failed``)."""

    def problems(self) -> list[str]:
        out = [f"a stream: {f}" for f in self.fates if f]
        for url in self.drains:
            address = url.removeprefix("http://")
            if self.drains[url] < 1:
                out.append(f"{url} did not drain the leaving decoder")
            if self.failed[url] > 0:
                out.append(f"{url}: {self.failed[url]:g} streams' decoder failed mid-answer")
            if not self.after_hook[url]:
                out.append(f"{url} was not read after the hook ended")
            elif max(self.after_hook[url]) > 0:
                out.append(f"{url} had {max(self.after_hook[url]):g} streams on the leaving "
                           "decoder at its SIGTERM")  # fmt: skip
            if f"prestop: {address}: drained" not in self.hook:
                out.append(f"the preStop hook did not wait for {address}")
        return out


def _scale_down_under_streams(
    cluster: K8sDryCluster, senders: list[str], *, control: bool = False
) -> ScaleDown:
    """Streams through ``senders`` (each pod's on both decoders), then decode 2 -> 1,
    each proxy pod's streams on the leaving decoder sampled all along. ``control``:
    streams far longer than the hook's start, cut by the client once each proxy pod
    was read twice after the hook ended (what they show then is all the control needs)."""
    e = cluster.elastic
    assert e is not None
    urls = list(cluster.proxies.values())
    log = cluster.logs / "sk-decode-1.prestop.log"
    before = log.stat().st_size if log.exists() else 0
    drains = {u: _counts(u, "servekit_proxy_drains_total", role="decode") for u in urls}
    failed = {u: _counts(u, "servekit_proxy_migrations_total") for u in urls}
    samples: list[tuple[float, str, float]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            for url in urls:
                at = time.monotonic()  # before the read: what it reads is at least as late
                with contextlib.suppress(OSError, ValueError):
                    samples.append((at, url, _on_leaving(url)))

    def hook_ended() -> float | None:
        ended = [at for at, pod, what in list(e.events)
                 if pod == "sk-decode-1" and what == "drained" and at >= started]  # fmt: skip
        return ended[-1] if ended else None

    def read_after_hook(timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            end = hook_ended()
            if end is not None and all(
                sum(1 for at, url, _ in list(samples) if url == u and at > end) >= 2 for u in urls
            ):
                return
            time.sleep(0.1)

    async def run() -> list[str]:
        tokens = 50 * TOKENS if control else TOKENS
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
            tasks = [asyncio.create_task(_stream(s, senders[i % len(senders)], i, tokens))
                     for i in range(4 * len(senders))]  # fmt: skip
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, _on_every_decoder, senders, 2)
            sampler.start()
            await loop.run_in_executor(None, e.scale, "sk-decode", 1)
            if control:
                await loop.run_in_executor(None, read_after_hook)
                for task in tasks:
                    task.cancel()
                done = await asyncio.gather(*tasks, return_exceptions=True)
                return [r if isinstance(r, str) else "cut by the client" for r in done]
            return list(await asyncio.gather(*tasks))

    sampler = threading.Thread(target=sample, daemon=True)
    started = time.monotonic()
    fates = asyncio.run(run())
    e.wait_gone(60)
    read_after_hook()  # each pod read after the hook, however late a loaded host reads
    stop.set()
    sampler.join()
    end = hook_ended()
    assert end is not None, "the leaving pod's hook never ended"
    return ScaleDown(
        fates,
        log.read_bytes()[before:].decode(errors="replace"),
        {u: _counts(u, "servekit_proxy_drains_total", role="decode") - drains[u] for u in urls},
        {u: _counts(u, "servekit_proxy_migrations_total") - failed[u] for u in urls},
        {u: [n for at, url, n in samples if url == u and at > end] for u in urls},
    )  # fmt: skip


def _kill(cluster: K8sDryCluster, pod: str) -> None:
    """Every process of the pod SIGKILLed, as a lost node or the OOM killer ends a pod
    (the pod's processes run in sessions of their own: found by their parent links)."""
    node = next(n for n in cluster.nodes if n.pod == pod)
    assert node.popen is not None
    for _ in range(50):  # until none is left (the proxy's parent restarts a dead worker)
        pids = proctree.members({node.popen.pid})
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    raise AssertionError(f"{pod}: processes left after SIGKILL: {pids}")


@pytest.mark.slow
def test_two_proxy_pods_drain_a_leaving_decoder_and_lose_only_their_own_streams() -> None:
    """k8s.proxy_replicas=2, k8s.proxy_workers=2 on the fake cluster, two decoders.

    1. Streams through both proxy pods, on both decoders; a decode scale-down: the
       leaving pod's preStop hook resolves the headless Service to both proxy pods,
       each drains the decoder and answers; every stream ends with [DONE], none
       had its decoder fail under it.
    2. The control: the fake DNS answers the first proxy pod only, streams go through
       the second: the hook waits for the first alone, the decoder gets SIGTERM with
       the second's streams on it (read on it after the hook, or cut under it: their
       decoder failed mid-answer), and the check above fails for it.
    3. Proxy pod 1 SIGKILLed mid-stream: its own streams are cut, pod 0's end [DONE],
       and pod 0 serves a new request after.
    The emulated autoscaler scrapes both pods, as the rendered query reads them.
    """
    sets = ["k8s.elastic=on", "k8s.autoscale=keda", "k8s.proxy_replicas=2",
            "k8s.proxy_workers=2", "k8s.drain_grace=30"]  # fmt: skip
    with k8s_dry_cluster(PD, reference=False, sets=sets, ready_timeout_s=180) as cluster:
        e, scaler = cluster.elastic, cluster.autoscaler
        assert e is not None and isinstance(scaler, Autoscaler)
        first, second = cluster.proxies.values()
        _MODEL[0] = _model(first)
        assert set(scaler.pages) == set(cluster.proxies) == {"sk-proxy-fake0", "sk-proxy-fake1"}
        assert set(scaler.scrape()) == set(cluster.proxies)
        e.scale("sk-decode", 2)
        _wait_decoders(cluster, 2)

        both = _scale_down_under_streams(cluster, [first, second])
        assert both.problems() == [], (both.problems(), both)

        hosts_file = cluster.root / "dns" / "hosts.json"
        hosts = json.loads(hosts_file.read_text())
        peers = [n for n in hosts if n.startswith("sk-proxy-peers")]
        assert peers and all(len(hosts[n]) == 2 for n in peers)  # the headless Service
        hosts.update({n: hosts[n][:1] for n in peers})  # the control: one address
        hosts_file.write_text(json.dumps(hosts))
        e.scale("sk-decode", 2)
        _wait_decoders(cluster, 2)
        control = _scale_down_under_streams(cluster, [second], control=True)
        found = control.problems()
        print("drains", both.drains, "control", found)
        address = second.removeprefix("http://")
        assert f"the preStop hook did not wait for {address}" in found, control
        # still on the decoder when read after the hook, or cut by its SIGTERM (the
        # simulated engine, as vLLM's API server, aborts what is in flight)
        assert any(p.startswith((f"{second} had ", f"{second}: ")) for p in found), control

        async def last() -> tuple[list[str], list[str], str]:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
                keep = [asyncio.create_task(_stream(s, first, i, TOKENS)) for i in range(3)]
                # the killed pod's streams: far longer than the kill takes to come
                lost = [
                    asyncio.create_task(_stream(s, second, 10 + i, 50 * TOKENS)) for i in range(3)
                ]
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(None, _on_every_decoder, [first, second], 1)
                _kill(cluster, "sk-proxy-fake1")
                kept, cut = await asyncio.gather(asyncio.gather(*keep), asyncio.gather(*lost))
                after = await _stream(s, first, 20, 8)
                return list(kept), list(cut), after

        kept, cut, after = asyncio.run(last())
        assert kept == ["", "", ""], kept
        assert all(cut), cut  # every stream of the killed pod ended without [DONE]
        assert after == ""
