"""A 4x request-rate ramp through an elastic PD rendering on the fake cluster (issue 41).

Shared by ``tests/platforms/test_k8s_elastic_ramp.py`` (a reduced run) and
``benchmarks/elastic_ramp.py`` (the full one). The layout is rendered with
``k8s.elastic=on`` and ``k8s.autoscale=keda`` and started on the fake cluster from its
manifests (``servekit.platforms.k8s.fake``: every pod runs the rendered ``pod.sh``
with simulated engines; the API server, LeaderWorkerSet's scaling and the HPA that
the ScaledObjects make are emulated by ``fakelws``). The trace's rate is low, ramps
up 4x, holds, ramps back down and holds low; every request is a greedy streamed
completion with ``ignore_eos`` (its length is ``max_tokens``), so a cut answer shows
as fewer tokens or no ``[DONE]``, and a changed one as other bytes than a static
deployment's answer to the same prompt.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from servekit.platforms.k8s.fake import K8sDryCluster, k8s_dry_cluster
from servekit.vocabulary import url_for
from servekit.vocabulary.metrics import GENERATION_TOKENS, PROMPT_TOKENS

LAYOUT = "a3/dsv41-ced-pd"  # 1 prefill + 1 decode engine, one process each
ROLES = {"prefill": "sk-prefill", "decode": "sk-decode"}


@dataclass(frozen=True)
class Request:
    at: float
    prompt: str
    max_tokens: int
    tail: bool = False
    """Sent only until a scale-down began (:func:`run`'s ``tail_until_down``)."""

    @property
    def key(self) -> str:
        """``request N``: the same request in every replay."""
        return self.prompt.partition(":")[0]


@dataclass
class Result:
    index: int
    sent: float
    key: str = ""
    skipped: bool = False
    """A tail request not sent: the scale-down it was there for had begun."""
    ok: bool = False
    error: str = ""
    text: str = ""
    tokens: int = 0
    ttft: float | None = None
    tpot: float | None = None
    done: bool = False
    end: float = 0.0


@dataclass
class Run:
    """One deployment's replay: each request's result, the replicas over time, the cost."""

    label: str
    results: list[Result]
    span: tuple[float, float]
    timeline: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    engine_seconds: dict[str, float] = field(default_factory=dict)
    history: list[tuple[float, str, int, float]] = field(default_factory=list)
    events: list[tuple[float, str, str]] = field(default_factory=list)
    deleted: str = ""
    served: dict[str, set[str]] = field(default_factory=dict)
    """Role -> every engine pod that processed tokens (the proxy routed to it)."""
    migrations: dict[str, int] = field(default_factory=dict)
    """The proxy's migrations by outcome (ok, diverged, refused, ...)."""

    def in_flight_at(self, t: float) -> int:
        return sum(1 for r in self.results if r.sent <= t <= r.end)

    def leaving_under_load(self) -> list[tuple[str, int]]:
        """Each pod that began leaving during the replay, and the streams then in flight."""
        return [(pod, self.in_flight_at(at)) for at, pod, what in self.events
                if what == "terminating" and self.span[0] <= at <= self.span[1]]  # fmt: skip

    def failed(self) -> int:
        return sum(1 for r in self.results if not r.ok and not r.skipped)

    def sent(self, trace: list[Request]) -> list[Request]:
        """The requests of ``trace`` this replay sent, none a tail one any more (a
        reference replays every one of them)."""
        return [dataclasses.replace(req, tail=False)
                for req, r in zip(trace, self.results, strict=True) if not r.skipped]  # fmt: skip

    def goodput(self, slo_ttft: float, slo_tpot: float) -> float:
        good = sum(
            1
            for r in self.results
            if r.ok and r.ttft is not None and r.ttft <= slo_ttft
            and (r.tpot is None or r.tpot <= slo_tpot)
        )  # fmt: skip
        return good / max(1e-9, self.span[1] - self.span[0])


def rate_at(t: float, span: float, low: float) -> float:
    """Low for 1/5 of the span, up 4x over 1/10, high 3/10, down over 1/10, low 3/10."""
    x = t / span
    if x < 0.2:
        return low
    if x < 0.3:
        return low * (1 + 3 * (x - 0.2) / 0.1)
    if x < 0.6:
        return 4 * low
    if x < 0.7:
        return low * (4 - 3 * (x - 0.6) / 0.1)
    return low


def ramp_trace(
    span: float,
    low: float,
    prompt_words: int,
    max_tokens: int,
    seed: int = 41,
    *,
    late_tokens: int | None = None,
    tail_s: float = 0.0,
) -> list[Request]:
    """Poisson arrivals at :func:`rate_at`, each prompt its own; ``tail_s`` more of the
    low rate after the span (tail requests); from the ramp down on, each answer
    ``late_tokens`` long (given: streams run across the scale-down that follows)."""
    rng = random.Random(seed)
    out, t = [], 0.0
    while True:
        t += rng.expovariate(max(rate_at(t, span, low), 1e-6))
        if t >= span + tail_s:
            return out
        words = " ".join(f"w{rng.randrange(10_000)}" for _ in range(prompt_words))
        late = late_tokens is not None and t >= 0.6 * span
        tokens = late_tokens if late and late_tokens is not None else max_tokens
        out.append(Request(t, f"request {len(out)}: {words}", tokens, tail=t >= span))


async def _one(
    session: aiohttp.ClientSession, url: str, model: str, i: int, req: Request, t0: float,
    enough: Callable[[], bool],
) -> Result:  # fmt: skip
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, t0 + req.at - loop.time()))
    if req.tail and enough():
        return Result(i, time.monotonic(), req.key, skipped=True)
    body = {"model": model, "prompt": req.prompt, "max_tokens": req.max_tokens,
            "temperature": 0, "ignore_eos": True, "stream": True}  # fmt: skip
    res = Result(i, time.monotonic(), req.key)
    first = last = None
    pieces: list[str] = []
    try:
        async with session.post(f"{url}/v1/completions", json=body) as resp:
            if resp.status != 200:
                res.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return res
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    res.done = True
                    break
                doc = json.loads(data)
                if "error" in doc:
                    res.error = json.dumps(doc["error"])[:200]
                    break
                for choice in doc.get("choices", []):
                    text = choice.get("text") or ""
                    if text:
                        now = time.monotonic()
                        first = now if first is None else first
                        last = now
                        pieces.append(text)
                        res.tokens += 1
    except (TimeoutError, aiohttp.ClientError, ValueError) as e:
        res.error = f"{type(e).__name__}: {e}"
    res.text = "".join(pieces)
    res.end = time.monotonic()
    if first is not None:
        res.ttft = first - res.sent
        if last is not None and res.tokens > 1:
            res.tpot = (last - first) / (res.tokens - 1)
    res.ok = res.done and not res.error and bool(res.text)
    return res


async def replay(
    url: str, trace: list[Request], enough: Callable[[], bool] = lambda: True
) -> list[Result]:
    """Every request at its time (a tail one only while ``enough()`` is false)."""
    timeout = aiohttp.ClientTimeout(total=300, sock_read=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.get(f"{url}/v1/models") as resp:
            model = (await resp.json())["data"][0]["id"]
        t0 = asyncio.get_running_loop().time()
        return list(await asyncio.gather(*(_one(session, url, model, i, r, t0, enough)
                                           for i, r in enumerate(trace))))  # fmt: skip


def _wait_ready(cluster: K8sDryCluster, counts: dict[str, int], timeout_s: float = 120.0) -> None:
    elastic = cluster.elastic
    assert elastic is not None
    deadline = time.monotonic() + timeout_s
    while any(elastic.ready_groups(ROLES[r]) < n for r, n in counts.items()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"groups not ready after {timeout_s:.0f} s: {counts}")
        time.sleep(0.5)
    time.sleep(3.0)  # the proxy's first probe of the new engines


def _metrics(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
            text: str = resp.read(4 << 20).decode("utf-8", "replace")
            return text
    except OSError:
        return None


def _migrations(text: str) -> dict[str, int]:
    """The proxy's ``servekit_proxy_migrations_total`` by outcome (ok, diverged, ...)."""
    return {
        sample.labels["outcome"]: int(sample.value)
        for family in text_string_to_metric_families(text)
        if family.name == "servekit_proxy_migrations"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def _sample(
    cluster: K8sDryCluster,
    stop: threading.Event,
    out: list[tuple[float, dict[str, int]]],
    served: dict[str, set[str]],
) -> None:
    """The instances of each role over time, and each engine pod that processed tokens
    (its own ``vllm:prompt_tokens`` and ``vllm:generation_tokens``: the proxy routed to it)."""
    elastic = cluster.elastic
    assert elastic is not None
    while not stop.wait(0.5):
        out.append((time.monotonic(), {r: elastic.replicas(lws) for r, lws in ROLES.items()}))
        for pod in list(elastic.run.pods_of["sk"]):
            role = pod.labels.get("app.kubernetes.io/component", "")
            ports = [p["containerPort"] for p in pod.template["spec"]["containers"][0]["ports"]
                     if str(p.get("name", "")).startswith("api-")]  # fmt: skip
            if role not in ROLES or not ports or pod.name in served.get(role, set()):
                continue
            text = _metrics(url_for(pod.address, ports[0]))
            if text is None:
                continue
            tokens = sum(
                sample.value
                for family in text_string_to_metric_families(text)
                if family.name in (PROMPT_TOKENS, GENERATION_TOKENS)
                for sample in family.samples
                if sample.name.endswith("_total")
            )
            if tokens > 0:
                served.setdefault(role, set()).add(pod.name)


def _engine_seconds(
    events: list[tuple[float, str, str]], span: tuple[float, float], start: dict[str, int]
) -> dict[str, float]:
    """Per role, the seconds each engine's leader pod existed within the span."""
    out = {}
    for role, lws in ROLES.items():
        alive: dict[str, float] = {f"{lws}-{g}": span[0] for g in range(start[role])}
        total = 0.0
        for at, pod, what in events:
            if not pod.startswith(lws + "-") or pod.count("-") != lws.count("-") + 1:
                continue
            if what == "added" and pod not in alive:
                alive[pod] = max(at, span[0])
            elif what == "deleted" and pod in alive:
                total += max(0.0, min(at, span[1]) - alive.pop(pod))
        total += sum(max(0.0, span[1] - since) for since in alive.values())
        out[role] = total
    return out


def elastic_sets(timing: str, slo: tuple[float, float], grace: int, max_replicas: int) -> list[str]:
    return [
        "k8s.elastic=on",
        "k8s.autoscale=keda",
        f"k8s.scale_timing={timing}",
        f"k8s.slo={slo[0]:g},{slo[1]:g}",
        f"k8s.drain_grace={grace}",
        f"k8s.max_replicas={max_replicas}",
    ]


def compressed(trace: list[Request], factor: float) -> list[Request]:
    """The same requests sent ``factor`` times faster (a reference's answers only)."""
    return [Request(r.at / factor, r.prompt, r.max_tokens) for r in trace]


def run(
    label: str,
    trace: list[Request],
    sets: list[str],
    *,
    autoscale: bool,
    fixed: dict[str, int] | None = None,
    delete_at: float | None = None,
    speed: float | None = None,
) -> Run:
    """Replay ``trace`` through a fresh fake cluster: autoscaled, or at ``fixed`` counts.

    Its tail requests are sent until a pod other than the deleted one has begun leaving
    (a scale-down under way while streams run, however late a loaded host makes it)."""
    with k8s_dry_cluster(LAYOUT, reference=False, sets=sets, speed=speed,
                         ready_timeout_s=180) as cluster:  # fmt: skip
        elastic = cluster.elastic
        assert elastic is not None
        start = {"prefill": 1, "decode": 1}
        if fixed:
            for role, n in fixed.items():
                elastic.scale(ROLES[role], n)
            _wait_ready(cluster, fixed)
            start = dict(fixed)
        else:
            _wait_ready(cluster, start)
        if autoscale:
            assert cluster.autoscaler is not None
            cluster.autoscaler.start()
        stop = threading.Event()
        timeline: list[tuple[float, dict[str, int]]] = []
        served: dict[str, set[str]] = {}
        sampler = threading.Thread(
            target=_sample, args=(cluster, stop, timeline, served), daemon=True
        )
        sampler.start()
        deleted = ""
        killer = None
        if delete_at is not None:

            def delete() -> None:
                nonlocal deleted
                time.sleep(delete_at)
                deleted = f"{ROLES['decode']}-0"
                elastic.delete_pod(deleted)

            killer = threading.Thread(target=delete, daemon=True)
            killer.start()

        def scaled_down() -> bool:
            return any(what == "terminating" and pod != deleted
                       for _, pod, what in list(elastic.events))  # fmt: skip

        t0 = time.monotonic()
        results = asyncio.run(replay(cluster.entry_url, trace, scaled_down))
        t1 = time.monotonic()
        migrations = _migrations(_metrics(cluster.entry_url) or "")
        if killer is not None:
            killer.join()
        stop.set()
        sampler.join()
        history = list(cluster.autoscaler.history) if cluster.autoscaler else []
        if cluster.autoscaler is not None:
            cluster.autoscaler.stop()
        elastic.wait_gone()
        events = list(elastic.events)
    out = Run(label, results, (t0, t1), timeline, {}, history, events, deleted, served)
    out.migrations = migrations
    out.engine_seconds = _engine_seconds(events, (t0, t1), start)
    return out


def changed(a: Run, b: Run) -> list[int]:
    """Requests answered by both whose texts differ."""
    theirs = {y.key: y for y in b.results if y.ok}
    return [x.index for x in a.results
            if x.ok and x.key in theirs and x.text != theirs[x.key].text]  # fmt: skip


def summary(r: Run, slo: tuple[float, float]) -> dict[str, Any]:
    peak = {role: max((c[role] for _, c in r.timeline), default=0) for role in ROLES}
    low = {role: min((c[role] for _, c in r.timeline), default=0) for role in ROLES}
    return {
        "label": r.label,
        "requests": sum(1 for x in r.results if not x.skipped),
        "failed": r.failed(),
        "cut": sum(1 for x in r.results if x.done and not x.ok),
        "goodput_rps": round(r.goodput(*slo), 3),
        "engine_seconds": {k: round(v, 1) for k, v in r.engine_seconds.items()},
        "replicas_min": low,
        "replicas_max": peak,
        "deleted": r.deleted,
        "engines_served": {role: len(v) for role, v in r.served.items()},
        "migrations": dict(r.migrations),
        "span_s": round(r.span[1] - r.span[0], 1),
    }
