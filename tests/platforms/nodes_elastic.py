"""A new machine's join and leave under load, on the fake nodes cluster (issue 41).

Shared by ``tests/platforms/test_nodes_elastic_dryrun.py`` (one run of each) and
``benchmarks/nodes_elastic_leave.py`` (rounds of each, with the proxy's own rescues
on and off). ``a2/deepseekv4-flash/2p2d`` rendered with ``nodes.elastic=on`` runs on
the fake nodes cluster; ``scale/decode0/run.sh INDEX ADDRESS`` starts a new decode
machine on a spare loopback address; nine greedy completions (six streamed, three
not: an unstreamed answer cannot migrate) run while it is SIGTERMed, and
:func:`clean` says what went wrong against an undisturbed run's answers.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from servekit.platforms.fake import Node
from servekit.platforms.nodes.fake import NodesDryCluster
from servekit.vocabulary.metrics import GENERATION_TOKENS, NUM_REQUESTS_RUNNING

LAYOUT = "a2/deepseekv4-flash/2p2d"
MODEL = "deepseek_v4"
GROUP = "decode0"
SETS = ["nodes.elastic=on", "nodes.drain_grace=1", "nodes.drain_wait=30"]
PROMPTS = [f"request {i}: the quick brown fox" for i in range(9)]
TOKENS = 48
LEAVE_CALL = 'proxy_module servekit.proxy.prestop "${LEAVE[@]}" &'


@dataclass(frozen=True)
class Answer:
    ok: bool
    text: str
    finish: str | None
    error: str = ""


async def ask(session: aiohttp.ClientSession, url: str, i: int) -> Answer:
    """Request i: streamed unless i % 3 == 2 (an unstreamed answer cannot migrate)."""
    stream = i % 3 != 2
    body = {"model": MODEL, "prompt": PROMPTS[i], "max_tokens": TOKENS, "temperature": 0,
            "ignore_eos": True, "stream": stream}  # fmt: skip
    try:
        async with session.post(f"{url}/v1/completions", json=body) as resp:
            if resp.status != 200:
                return Answer(False, "", None, f"HTTP {resp.status}: {(await resp.text())[:200]}")
            if not stream:
                choice = (await resp.json())["choices"][0]
                return Answer(True, choice["text"], choice["finish_reason"])
            text, finish, done = "", None, False
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data: "):
                    continue
                if line[6:] == b"[DONE]":
                    done = True
                    break
                doc = json.loads(line[6:])
                if "error" in doc:
                    return Answer(False, text, finish, json.dumps(doc["error"])[:200])
                choice = doc["choices"][0]
                text += choice.get("text") or ""
                finish = choice.get("finish_reason") or finish
            return Answer(done, text, finish, "" if done else "cut: no [DONE]")
    except (aiohttp.ClientError, ValueError, TimeoutError) as exc:
        return Answer(False, "", None, f"{type(exc).__name__}: {exc}")


def metric(url: str, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name in (name, f"{name}_total")
        and all(s.labels.get(k) == v for k, v in labels.items())
    )


def pool(cluster: NodesDryCluster) -> dict[str, str]:
    """The proxy's instances: URL -> state, read through its admin API with the key."""
    request = urllib.request.Request(f"{cluster.entry_url}/admin/instances",
                                     headers={"Authorization": f"Bearer {cluster.admin_key}"})  # fmt: skip
    doc = json.load(urllib.request.urlopen(request, timeout=10))
    return {i["url"]: i["state"] for i in doc["instances"]}


def admin(cluster: NodesDryCluster, action: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        f"{cluster.entry_url}/admin/instances/{action}", data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {cluster.admin_key}",
                 "Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    urllib.request.urlopen(request, timeout=30).read()


def wait(what: str, ok: Any, timeout_s: float = 60.0, node: Node | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        if node is not None and node.popen is not None and node.popen.poll() is not None:
            raise AssertionError(f"{node.pod} exited: {node.output.read_text()[-2000:]}")
        assert time.monotonic() < deadline, f"not {what} after {timeout_s:.0f} s"
        time.sleep(0.1)


@dataclass
class Outcome:
    answers: list[Answer]
    generated: float
    """Tokens the new engine generated before the SIGTERM (it was routed to)."""
    failures: float
    """Backend failures the proxy counted meanwhile (an engine that died under it)."""
    rescued: float
    """Requests the proxy retried or streams it migrated because an engine failed (a
    drain's migrations are not counted: they are the leave's own)."""
    held: bool
    """The proxy still holds the new engine afterwards."""
    output: str
    returncode: int | None


def _rescues(proxy: str) -> float:
    return (metric(proxy, "servekit_proxy_retries") + metric(proxy, "servekit_proxy_migrations")
            - metric(proxy, "servekit_proxy_drain_migrated_streams"))  # fmt: skip


def disturbed(cluster: NodesDryCluster, index: int, entry: Path | None = None) -> Outcome:
    """Instance ``index`` joins; requests run; SIGTERM once streams run on it."""
    node = cluster.start_scaled(GROUP, index, entry=entry)
    url = f"http://{cluster.spare[0]}:7100"
    wait("admitted", lambda: pool(cluster).get(url) == "healthy", node=node)
    before = metric(url, GENERATION_TOKENS)
    failures = metric(cluster.entry_url, "servekit_proxy_backend_failures")
    rescued = _rescues(cluster.entry_url)

    async def run() -> tuple[list[Answer], float]:
        async with aiohttp.ClientSession() as session:
            tasks = [asyncio.ensure_future(ask(session, cluster.entry_url, i))
                     for i in range(len(PROMPTS))]  # fmt: skip
            deadline = time.monotonic() + 30
            while not (metric(url, NUM_REQUESTS_RUNNING) >= 2 and metric(url, GENERATION_TOKENS)
                       > before):  # fmt: skip
                assert time.monotonic() < deadline, "no stream ran on the new engine"
                await asyncio.sleep(0.05)
            generated = metric(url, GENERATION_TOKENS) - before
            assert node.popen is not None
            node.popen.send_signal(signal.SIGTERM)
            return list(await asyncio.gather(*tasks)), generated

    answers, generated = asyncio.run(run())
    assert node.popen is not None
    node.popen.wait(60)
    return Outcome(
        answers, generated,
        metric(cluster.entry_url, "servekit_proxy_backend_failures") - failures,
        _rescues(cluster.entry_url) - rescued,
        url in pool(cluster), node.output.read_text(), node.popen.returncode,
    )  # fmt: skip


def clean(outcome: Outcome, baseline: list[Answer]) -> list[str]:
    """Everything wrong with a leave: empty when nothing was lost or cut, every answer is
    the undisturbed one, no backend failed under the proxy and it holds the engine no more."""
    wrong = [f"request {i}: {a.error or 'other answer'}"
             for i, (a, b) in enumerate(zip(outcome.answers, baseline, strict=True))
             if not a.ok or (a.text, a.finish) != (b.text, b.finish)]  # fmt: skip
    if outcome.failures:
        wrong.append(f"{outcome.failures:.0f} backend failure(s) at the proxy")
    if outcome.rescued:
        wrong.append(f"{outcome.rescued:.0f} request(s) retried or migrated off a failed engine")
    if outcome.held:
        wrong.append("the proxy still holds the engine")
    return wrong


async def _answers(url: str) -> list[Answer]:
    async with aiohttp.ClientSession() as session:
        return list(await asyncio.gather(*(ask(session, url, i) for i in range(len(PROMPTS)))))


def undisturbed(cluster: NodesDryCluster) -> list[Answer]:
    """Every request answered by the rendered instances only."""
    return asyncio.run(_answers(cluster.entry_url))


def join_only(cluster: NodesDryCluster) -> Path:
    """The positive control's script: ``scale/decode0/run.sh`` without its leave."""
    script = (cluster.folder / "scale" / GROUP / "run.sh").read_text()
    assert LEAVE_CALL in script
    control = cluster.folder / "scale" / GROUP / "join-only.sh"
    control.write_text(script.replace(LEAVE_CALL, "false &"))
    return control
