"""Streams through simulated ``a3/deepseekv4-flash/2p2d`` while an engine's node is lost.

The layout's Plan (loopback hosts, free ports) becomes one simulator serving its 40
API servers, exactly as ``servekit up NAME --engine sim`` converts it (the engines'
reasoning and tool-call parsers on, their nodes known), and the proxy runs
in-process from the Plan's own argv (its ``--failure-domains`` included), with
probes every 0.5 s (timing out after 1 s) instead of 2 s (and 2 s) so that a run
finds a silent node and restores its engines in seconds.

One run: 16 greedy streams (completions with ``max_tokens``, chat without it, chat
that thinks, chat with a tool or a JSON schema) are read once without a fault and
once with one, and each faulted answer must end whole (``[DONE]``, no error event)
and be the unfaulted one: the same bytes of every field the client reads, event
after event (:func:`answer_of`: id, object, model, text, content, reasoning, each
tool call's id, name and arguments, finish and stop reasons, usage; ``created``
and the cache's counts aside). How the tokens fall into events is not part of the
answer: the simulated engines speculate (MTP, 2.89 tokens per step), and a
continuation's first token comes alone from its prefill, as a real engine's does,
so its steps group the tokens after the cut differently; ``framed`` counts the
streams whose raw bytes are the same too. The faults (:data:`SCENARIOS`):

- ``decode-killed``: every DP rank of decode engine ``decode0`` (node 2) dies once
  each stream has text (EngineDeadError: error events, then 500s);
- ``decode-node-silent``: node 2 is lost silently (nothing answers, streams stall);
- ``prefill-node-silent``: node 1 (``prefill1``'s 4 ranks) is lost silently while
  the streams start one after another, at the moment a prefill runs there or a
  decoder pulls KV from there (``met`` counts the runs where one did).

Used by ``benchmarks/migration_campaign.py`` (10 runs of 10) and, one run each, by
``tests/proxy/test_node_loss.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from tests.helpers.answers import answer_of

from servekit.catalog import load
from servekit.local.portplan import LOOPBACK, port_map
from servekit.local.simrun import sim_spec_doc
from servekit.proxy.config import parse_args
from servekit.proxy.server import RunningProxy, start_proxy
from servekit.render import Plan, PlanOptions, build_plan
from servekit.sim import spec_from_mapping
from servekit.sim.testing import RunningSim, running_sim

LAYOUT = "a3/deepseekv4-flash/2p2d"
SCENARIOS = ("decode-killed", "decode-node-silent", "prefill-node-silent")
STREAMS = 16
CREATED = re.compile(rb'"(created|cached_tokens)":\d+')
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
SCHEMA = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}
PROBES = {"health_interval_s": 0.5, "health_timeout_s": 1.0}
LONG_PROMPT = " ".join(f"line {i} of the operator's notes on the cluster." for i in range(150))


def plan_of(layout: str = LAYOUT) -> Plan:
    found = load(layout).layout
    options = PlanOptions(
        hosts=(LOOPBACK,) * found.nodes,
        bind_host=LOOPBACK,
        port_map=port_map(found, free_ports=True),
    )
    return build_plan(found, options)


def stream(run: int, i: int, long_prompt: bool) -> tuple[str, dict[str, Any]]:
    """The ``i``-th greedy stream of run ``run``: four kinds, in turn."""
    ask = f"run {run} stream {i}: how does the proxy carry a stream on?"
    if long_prompt:  # its own start: the prefills spread over every rank
        ask = f"{ask} {LONG_PROMPT}"
    if i % 4 == 0:
        body = {"prompt": ask, "max_tokens": 96, "ignore_eos": True}
        return "/v1/completions", {"model": "deepseek_v4", "temperature": 0, "stream": True, **body}
    chat: dict[str, Any] = {"messages": [{"role": "user", "content": ask}], "min_tokens": 60}
    if i % 4 == 2:
        chat["chat_template_kwargs"] = {"thinking": True}
    elif i % 4 == 3:
        chat.update({"tools": TOOLS} if i % 8 == 3 else {"response_format": SCHEMA})
    return "/v1/chat/completions", {
        "model": "deepseek_v4", "temperature": 0, "stream": True, **chat,
    }  # fmt: skip


@dataclass
class Outcome:
    """One run: how its streams ended, and what the proxy counted meanwhile."""

    whole: int = 0  # ended with [DONE] and no error event
    same: int = 0  # the unfaulted answer, field for field (answer_of)
    framed: int = 0  # the unfaulted stream byte for byte, events and all
    met: bool = True  # the fault met work under way (prefill scenario: a prefill or pull)
    migrations: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    retries: Counter[str] = field(default_factory=Counter)


@dataclass
class Bench:
    """The simulator and the proxy of one layout."""

    plan: Plan
    sim: RunningSim
    proxy: RunningProxy
    client: aiohttp.ClientSession

    def names(self, engine: str) -> list[str]:
        return [p.name for p in self.plan.api_processes() if p.engine == engine]

    def fault(self, names: list[str], **patch: Any) -> None:
        for name in names:
            self.sim.set_faults(name, **patch)

    def busy(self, names: list[str]) -> bool:
        """A prefill runs on one of ``names``, or a decoder pulls KV from one (read on
        the simulator's own loop, in one call)."""
        endpoints = self.sim.server.endpoints

        def working(_: Any) -> bool:
            lost = {endpoints[n].spec.engine for n in names}
            if any(endpoints[n].engine.running or endpoints[n].engine.waiting for n in names):
                return True
            return any(
                p.engine_id in lost for e in endpoints.values() for p in e.kvreg.pulling.values()
            )

        return self.sim.call(working)

    def counts(self) -> dict[str, Counter[str]]:
        found: dict[str, Counter[str]] = {"migrations": Counter(), "failures": Counter(),
                                          "retries": Counter()}  # fmt: skip
        which = {"servekit_proxy_migrations": ("migrations", "outcome"),
                 "servekit_proxy_backend_failures": ("failures", "scope"),
                 "servekit_proxy_retries": ("retries", "stage")}  # fmt: skip
        for metric in self.proxy.router.metrics.registry.collect():
            if metric.name in which:
                key, label = which[metric.name]
                for sample in metric.samples:
                    if sample.name.endswith("_total"):
                        found[key][sample.labels[label]] += int(sample.value)
        return found

    async def settled(self, bound_s: float = 60.0) -> None:
        """Every instance healthy and unsuspected: routing is as before the fault."""
        deadline = asyncio.get_running_loop().time() + bound_s
        insts = list(self.proxy.router.instances())
        while not all(i.routable and i.suspect_since is None for i in insts):
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError("the instances never came back after the fault")
            await asyncio.sleep(0.05)


@contextlib.contextmanager
def _sim(plan: Plan, speed: float) -> Iterator[RunningSim]:
    spec = spec_from_mapping(sim_spec_doc(plan), where=f"{LAYOUT} -> sim spec").at_speed(speed)
    with running_sim(spec) as sim:
        yield sim


@contextlib.asynccontextmanager
async def bench(sim: RunningSim, plan: Plan, domains: bool = True) -> AsyncIterator[Bench]:
    """The proxy of the Plan (``domains`` False: without its ``--failure-domains``, the
    positive control)."""
    (proc,) = [p for p in plan.api_processes() if p.kind == "proxy"]
    config = parse_args([*proc.argv[2:], "--port", "0"], read_keys=False)
    config = dataclasses.replace(config, **PROBES)
    if not domains:
        config = dataclasses.replace(config, failure_domains=())
    proxy = await start_proxy(config)
    client = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    made = Bench(plan, sim, proxy, client)
    try:
        await made.settled()
        yield made
    finally:
        await client.close()
        await proxy.stop()


async def _read(
    b: Bench, req: tuple[str, dict[str, Any]], rid: str, started: asyncio.Event
) -> bytes:
    """A stream's bytes; ``started`` is set once it carries part of the answer."""
    async with b.client.post(b.proxy.url + req[0], json=req[1], headers={"X-Request-Id": rid}) as r:
        if r.status != 200:
            return await r.read()
        out = []
        async for line in r.content:
            out.append(line)
            if line.startswith(b"data: {") and b'"role":"assistant"' not in line:
                started.set()
        return b"".join(out)


async def one_run(b: Bench, scenario: str, run: int) -> Outcome:
    """One run of ``scenario``: the 16 streams without the fault, then with it."""
    long_prompt = scenario.startswith("prefill")
    reqs = [stream(run, i, long_prompt) for i in range(STREAMS)]
    rids = [f"run{run}-{i}" for i in range(STREAMS)]
    await b.settled()
    flags = [asyncio.Event() for _ in reqs]
    whole = await asyncio.gather(
        *(_read(b, r, i, f) for r, i, f in zip(reqs, rids, flags, strict=True))
    )
    await b.settled()
    before = b.counts()
    flags = [asyncio.Event() for _ in reqs]
    tasks: list[asyncio.Future[bytes]] = []

    async def launch() -> None:
        for req, rid, flag in zip(reqs, rids, flags, strict=True):
            tasks.append(asyncio.ensure_future(_read(b, req, rid, flag)))
            if long_prompt:  # one after another: some in prefill when the node goes
                await asyncio.sleep(0.03)

    launching = asyncio.ensure_future(launch())
    met = True
    if scenario == "prefill-node-silent":
        lost = b.names("prefill1")
        met = await _when(lambda: b.busy(lost), 5.0)
        b.fault(lost, unreachable=True)
        await launching
    else:
        await launching
        await asyncio.wait_for(asyncio.gather(*(f.wait() for f in flags)), 60)
        lost = b.names("decode0")
        b.fault(lost, **({"dead": True} if scenario == "decode-killed" else {"unreachable": True}))
    try:
        cut = await asyncio.wait_for(asyncio.gather(*tasks), 300)
    finally:
        b.fault(lost, dead=False, unreachable=False)
    after = b.counts()
    out = Outcome(met=met)
    for raw_got, raw_want in zip(cut, whole, strict=True):
        got, want = CREATED.sub(rb'"\1":0', raw_got), CREATED.sub(rb'"\1":0', raw_want)
        out.whole += got.rstrip().endswith(b"data: [DONE]") and b'"error"' not in got
        out.same += answer_of(got) == answer_of(want)
        out.framed += got == want
    out.migrations = after["migrations"] - before["migrations"]
    out.failures = after["failures"] - before["failures"]
    out.retries = after["retries"] - before["retries"]
    return out


async def _when(cond: Any, bound_s: float) -> bool:
    """Poll ``cond`` until true (True) or ``bound_s`` passed (False)."""
    deadline = asyncio.get_running_loop().time() + bound_s
    while not await asyncio.to_thread(cond):  # the proxy's loop runs on meanwhile
        if asyncio.get_running_loop().time() > deadline:
            return False
    return True


async def runs(b: Bench, scenario: str, count: int, first: int = 0) -> list[Outcome]:
    return [await one_run(b, scenario, first + n) for n in range(count)]


def campaign(
    scenario: str,
    groups: int,
    runs_per_group: int,
    speed: float = 2.0,
    on_group: Callable[[int, list[Outcome]], None] = lambda g, runs: None,
    domains: bool = True,
) -> list[list[Outcome]]:
    """``groups`` groups of ``runs_per_group`` runs of ``scenario`` on one simulator
    (``on_group`` sees each group as it ends; ``domains``: see :func:`bench`)."""
    plan = plan_of()

    async def go(sim: RunningSim) -> list[list[Outcome]]:
        out = []
        async with bench(sim, plan, domains) as b:
            for g in range(groups):
                out.append(await runs(b, scenario, runs_per_group, g * runs_per_group))
                on_group(g, out[-1])
        return out

    with _sim(plan, speed) as sim:
        return asyncio.run(go(sim))
