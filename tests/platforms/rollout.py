"""A template change rolled through a running elastic rendering under load (issue 41).

Shared by ``tests/platforms/test_k8s_rollout.py`` (one reduced run and its positive
control) and ``benchmarks/rollout_campaign.py`` (repeated runs). The layout runs on
the fake cluster from its manifests with ``k8s.elastic=on`` (simulated engines, the
proxy discovering the pods through the emulated API server); the re-rendered
manifests are applied while a steady stream of greedy streamed completions
(``ignore_eos``: each answer is ``max_tokens`` long) goes through the proxy, and the
emulated LWS and StatefulSet controllers (``servekit.platforms.k8s.fakerollout``)
roll the changed LeaderWorkerSet as its ``rolloutStrategy`` says.

What :func:`problems` checks, each named in its finding:

- every request answered, none cut, each byte for byte the answer the same prompt
  gets from the deployment at rest (after the rollout, all at once);
- with ``maxSurge``: the surge group (index ``replicas``) was made, served tokens the
  proxy routed to it (found through discovery while it ran), and was removed;
- the groups that can serve (every pod Ready, none leaving) never fell below
  ``replicas`` (``maxUnavailable: 0``), and no request found the proxy without an
  engine of the role to route to (it would wait, ``--pool-wait``, or be refused);
- every old group was replaced, the highest index first, and every pod that left was
  drained by its preStop hook (the proxy answered drained) before its SIGTERM.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from tests.platforms.elastic_ramp import Request, Result, _metrics, _one, _sample, replay

from servekit.platforms.k8s.fake import K8sDryCluster
from servekit.platforms.k8s.fakelws import serving_groups
from servekit.platforms.k8s.fakerollout import REVISION_LABEL, Strategy

LAYOUT = "a3/dsv41-ced-pd"  # 1 prefill + 1 decode engine, one pod each
SETS = ["k8s.elastic=on", "k8s.drain_grace=30"]
IDLE_DRAIN_S = "0.05"
"""A drain longer than this (a bucket bound of the proxy's histogram) waited for streams."""


@dataclass(frozen=True)
class ProxyCounts:
    """What the proxy counted for one role so far (``/metrics``)."""

    drains: int = 0
    waited_drains: int = 0
    """drains longer than :data:`IDLE_DRAIN_S`: streams were running on the engine"""
    pool_waits: int = 0
    """requests that found no engine of the role routable and waited (``--pool-wait``)"""

    def __sub__(self, other: ProxyCounts) -> ProxyCounts:
        return ProxyCounts(self.drains - other.drains,
                           self.waited_drains - other.waited_drains,
                           self.pool_waits - other.pool_waits)  # fmt: skip


def proxy_counts(url: str, role: str) -> ProxyCounts:
    total = quick = waits = 0
    for family in text_string_to_metric_families(_metrics(url) or ""):
        for sample in family.samples:
            if family.name == "servekit_proxy_pool_waits" and sample.name.endswith("_total"):
                waits += int(sample.value) if sample.labels.get("stage") == role else 0
            if family.name != "servekit_proxy_drain_seconds" or sample.labels.get("role") != role:
                continue
            if sample.name.endswith("_count"):
                total = int(sample.value)
            elif sample.name.endswith("_bucket") and sample.labels.get("le") == IDLE_DRAIN_S:
                quick = int(sample.value)
    return ProxyCounts(total, total - quick, waits)


@dataclass
class Rollout:
    """One rollout under load: what the clients saw and what the cluster recorded."""

    lws: str
    replicas: int
    max_surge: int
    results: list[Result]
    reference: dict[str, str]
    """prompt -> the answer at rest"""
    span: tuple[float, float]
    """from the apply to the rollout's end"""
    events: list[tuple[float, str, str]]
    replaced: list[str]
    revisions: dict[str, str]
    """pod -> its revision, at the end"""
    update: str
    size: int
    served: set[str] = field(default_factory=set)
    """engine pods of the role that processed tokens while the load ran"""
    prompts: list[str] = field(default_factory=list)
    counted: ProxyCounts = field(default_factory=ProxyCounts)
    """What the proxy counted for the role during the rollout."""

    @property
    def surge_pod(self) -> str:
        return f"{self.lws}-{self.replicas}"

    def failed(self) -> list[Result]:
        return [r for r in self.results if not r.ok]

    def cut(self) -> list[Result]:
        """Answers that began and did not end (no ``[DONE]`` or shorter than at rest)."""
        return [
            r
            for r, p in zip(self.results, self.prompts, strict=True)
            if r.text and (not r.done or len(r.text) < len(self.reference.get(p, "")))
        ]

    def changed(self) -> list[int]:
        return [r.index for r, p in zip(self.results, self.prompts, strict=True)
                if r.ok and r.text != self.reference.get(p)]  # fmt: skip

    def fewest_serving(self) -> int:
        during = [n for at, n in serving_groups(self.events, self.lws, self.size)
                  if self.span[0] <= at <= self.span[1]]  # fmt: skip
        return min(during, default=-1)

    def of(self, pod: str) -> list[str]:
        """What happened to one pod during the rollout, in order."""
        return [w for at, p, w in self.events if p == pod and at >= self.span[0]]


def prompts(n: int, words: int, seed: int = 41) -> list[str]:
    rng = random.Random(seed)
    return [f"request {i}: " + " ".join(f"w{rng.randrange(10_000)}" for _ in range(words))
            for i in range(n)]  # fmt: skip


async def _stream(
    url: str, texts: list[str], interval: float, max_tokens: int, done: threading.Event
) -> list[Result]:
    """One request every ``interval`` s until ``done`` (or the prompts run out)."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=300, sock_read=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.get(f"{url}/v1/models") as resp:
            model = (await resp.json())["data"][0]["id"]
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        tasks = []
        for i, text in enumerate(texts):
            if done.is_set():
                break
            req = Request(i * interval, text, max_tokens)
            tasks.append(asyncio.create_task(_one(session, url, model, i, req, t0, lambda: False)))
            await asyncio.sleep(max(0.0, t0 + (i + 1) * interval - loop.time()))
        return list(await asyncio.gather(*tasks))


def roll(
    cluster: K8sDryCluster,
    lws: str,
    sets: list[str],
    *,
    edit: Callable[[dict[str, Any]], None] | None = None,
    interval: float = 0.25,
    prompt_words: int = 300,
    max_tokens: int = 48,
    lead_s: float = 1.0,
    tail_s: float = 1.0,
) -> Rollout:
    """Apply ``sets`` (and ``edit``) to the running cluster while requests stream."""
    elastic = cluster.elastic
    assert elastic is not None
    texts = prompts(4000, prompt_words)
    done = threading.Event()
    box: dict[str, Any] = {}

    def apply() -> None:
        time.sleep(lead_s)
        box["t0"] = time.monotonic()
        try:
            box["replaced"] = cluster.apply(sets, edit)
        except Exception as exc:
            box["error"] = exc
        box["t1"] = time.monotonic()
        time.sleep(tail_s)
        done.set()

    role = next(iter(p.labels["app.kubernetes.io/component"] for p in elastic.run.pods_of["sk"]
                     if p.workload == lws))  # fmt: skip
    before = proxy_counts(cluster.entry_url, role)
    stop = threading.Event()
    served: dict[str, set[str]] = {}
    sampler = threading.Thread(target=_sample, args=(cluster, stop, [], served), daemon=True)
    applier = threading.Thread(target=apply, daemon=True)
    sampler.start()
    applier.start()
    try:
        results = asyncio.run(_stream(cluster.entry_url, texts, interval, max_tokens, done))
    finally:
        done.set()
        applier.join()
        stop.set()
        sampler.join()
    if "error" in box:
        raise box["error"]
    counted = proxy_counts(cluster.entry_url, role) - before
    sent = texts[: len(results)]
    again = asyncio.run(replay(cluster.entry_url, [Request(0.0, t, max_tokens) for t in sent]))
    bad = [r.error for r in again if not r.ok]
    if bad:
        raise RuntimeError(f"the deployment at rest failed {len(bad)} requests: {bad[:3]}")
    st = elastic.sets[lws]
    pods = [p for p in elastic.run.pods_of["sk"] if p.workload == lws]
    return Rollout(
        lws=lws,
        replicas=st.replicas,
        max_surge=Strategy.of(st.spec).counts(st.replicas)[1],
        results=results,
        reference={t: r.text for t, r in zip(sent, again, strict=True)},
        span=(box["t0"], box["t1"]),
        events=list(elastic.events),
        replaced=list(box["replaced"]),
        revisions={p.name: p.labels[REVISION_LABEL] for p in pods},
        update=st.update,
        size=st.size,
        served=served.get(role, set()),
        prompts=sent,
        counted=counted,
    )


def problems(r: Rollout) -> list[str]:
    """What went wrong in a rollout, each finding named (empty: it was lossless)."""
    return [*_answers(r), *_groups(r), *_surge(r), *_drains(r)]


def _answers(r: Rollout) -> list[str]:
    out = []
    if r.failed():
        out.append(f"failed: {len(r.failed())} of {len(r.results)} requests, e.g. "
                   f"{[x.error for x in r.failed()][:2]}")  # fmt: skip
    if r.cut():
        out.append(f"cut: {len(r.cut())} answers ended early")
    if r.changed():
        out.append(f"changed: answers {r.changed()[:5]} differ from the deployment's at rest")
    return out


def _groups(r: Rollout) -> list[str]:
    out = []
    if r.counted.pool_waits:
        out.append(f"empty pool: {r.counted.pool_waits} requests found no engine of the role "
                   f"routable and waited for one (the proxy's --pool-wait)")  # fmt: skip
    fewest = r.fewest_serving()
    if fewest < r.replicas:
        out.append(f"unavailable: {fewest} of {r.replicas} groups could serve during the rollout")
    old = [f"{r.lws}-{i}" for i in range(r.replicas)][::-1]
    leaders = [p for p in r.replaced if p.count("-") == r.lws.count("-") + 1]
    if leaders != old:
        out.append(f"order: the old groups were replaced as {leaders}, not {old}")
    whole = len(r.revisions) == r.replicas * r.size
    if not whole or any(rev != r.update for rev in r.revisions.values()):
        out.append(f"revisions: at the end {r.revisions}, not {r.replicas} groups of {r.update}")
    return out


def _surge(r: Rollout) -> list[str]:
    if not r.max_surge:
        made = [p for _, p, w in r.events if w == "added" and p.startswith(r.surge_pod)]
        return [f"surge: {made} made without maxSurge"] if made else []
    out = []
    seen = r.of(r.surge_pod)
    if "added" not in seen or "ready" not in seen:
        out.append(f"surge: {r.surge_pod} was not made and Ready ({seen})")
    elif "deleted" not in seen:
        out.append(f"surge: {r.surge_pod} was not removed ({seen})")
    if r.surge_pod not in r.served:
        out.append(f"surge: the proxy routed no request to {r.surge_pod} "
                   f"(served: {sorted(r.served)})")  # fmt: skip
    return out


def _drains(r: Rollout) -> list[str]:
    out = []
    leaving = [*r.replaced, *([r.surge_pod] if r.max_surge else [])]
    c = r.counted
    if c.drains < len(leaving) or c.waited_drains == 0:
        out.append(f"drain: the proxy drained {c.drains} of the {len(leaving)} leaving "
                   f"engines, {c.waited_drains} with streams in flight (none: the load "
                   f"missed them)")  # fmt: skip
    steps = ("terminating", "preStop exit 0", "drained", "sigterm", "deleted")
    for pod in leaving:
        seen = [w for w in r.of(pod)
                if w in steps or w.startswith(("preStop", "no preStop"))]  # fmt: skip
        if tuple(seen[: len(steps)]) != steps:
            out.append(f"drain: {pod} left as {seen}, not drained before its SIGTERM")
    return out
