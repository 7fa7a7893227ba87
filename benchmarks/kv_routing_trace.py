"""Cache-aware routing on a trace, side by side: servekit's policies and vllm-router's.

    .venv/bin/python benchmarks/kv_routing_trace.py [--engine sim|vllm] [--layout NAME]
        [--requests N] [--rate R] [--groups G] [--shared-blocks B] [--speed 1]
        [--slo-ttft-ms 2000] [--slo-tpot-ms 100] [--vllm-router PATH] [--out kv_routing.json]

Each router in turn in front of the same engines (cold caches, same ports, same
trace): servekit's proxy with round-robin, least-loaded, prefix-affinity and
kv-events (every routed engine publishes KV events), then vllm-router (PyPI
``vllm-router``, installed by hand: ``pip install vllm-router``; skipped with a
note when absent) with its ``cache_aware`` policy and, when it accepts them, its
``kv_aware`` policy fed by the same events. The trace is Mooncake-format,
generated from a seed (:mod:`servekit.bench.tracegen`: Poisson arrivals, groups
sharing their leading 512-token blocks); prompts are built so each ``hash_id`` is
the same 512 tokens wherever it appears, and each request streams exactly its
``output_length`` tokens (``ignore_eos``).

``--engine sim`` (the default): a fresh simulator per router serving the layout's
engines (default ``a3/deepseekv4-flash/2p2d``, KV events on every prefill
endpoint); a word is a token there, so block ``h`` is the words ``h<h>w0 ..``.

``--engine vllm``: real vLLM CPU engines, the two replicas of ``local/dp2`` (the
default; any replica-mode CPU layout serving the tiny model will do), started
once through servekit itself (``servekit up LAYOUT --engine vllm --detach
--free-ports`` in a scratch project folder, the tiny model built there, runs under
``SERVEKIT_RUNS`` there) and brought down on exit, Ctrl-C and SIGTERM included.
Each router is its own process on a free port in front of the run's two engines,
with the run's own proxy's view of them (its ``--replica`` URLs and ``--kv-events``
publishers, from the run's ``plan.json``, ports as ``--free-ports`` mapped them).
Between routers the engines' prefix caches are emptied with vLLM's ``POST
/reset_prefix_cache`` (served when ``VLLM_SERVER_DEV_MODE=1``, which vLLM's own
``bench sweep`` sets for the same purpose; the engines listen on loopback only)
instead of a down + up: a restart would cost each router the engines' start-up
again (17 s for one engine on an idle 2-core host, docs/local.md; here two start
side by side), as much as its replay; and every router gets the same warmed engine
processes (one warm-up request each before the first router), so none pays the
first requests' costs alone. The hit counters are cumulative, so a
router's hit rate is their change over its replay. The trace is scaled to the tiny
model (max_model_len 4096, vLLM's CPU block size 128, read from the engines):
defaults 60 requests at 2/s, 6 groups sharing 3 blocks, 0-1 own blocks, 16-32
output tokens, so the longest prompt is 2559 tokens and every router's replay
takes about 30 s. Its prompts are made of words that are one token each in the
tiny model's tokenizer, alone and after a space; its byte-level pre-tokenizer cuts
at every space, so no token spans two words and a block is the same tokens
wherever it appears. Checked before the engines start against the tokenizer file
for every prompt, and once up against an engine's own ``/tokenize``.

Per run: the prefix-cache hit rate of the engines routed to first (prefill, or
replicas: their ``vllm:prefix_cache_hits`` over ``vllm:prefix_cache_queries``,
tokens), TTFT p50/p99, TPOT p50/p99, errors (and their causes in the note
column), goodput (requests per second meeting both SLOs), and the CPU seconds of
the router and of the engines (the simulator, or every process of each vLLM
engine). Open loop: request k is sent at its trace time whatever came back.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
from bench_common import cpu_seconds_of

from servekit.bench.trace import read_trace
from servekit.bench.tracegen import TraceShape, write_trace
from servekit.bench.workloads.trace import trace_hit_rate
from servekit.catalog.loader import load
from servekit.local.proctree import members
from servekit.local.simrun import layout_sim_spec
from servekit.local.state import read_state
from servekit.local.tinymodel.ondemand import ensure_tiny_model, serves_tiny_model
from servekit.proxy import KV_POLICY
from servekit.render import Plan

MODEL_KEY = "served_model_name"
MOONCAKE_BLOCK = 512
LAYOUTS = {"sim": "a3/deepseekv4-flash/2p2d", "vllm": "local/dp2"}
SHAPES = {
    "sim": TraceShape(requests=300, rate=10.0, groups=16, shared_blocks=4, own_blocks=(0, 2),
                      output_tokens=(8, 64)),
    # the tiny model on two cores: prompts <= (3 + 1) * 512 + 511 tokens, ~30 s a replay
    "vllm": TraceShape(requests=60, rate=2.0, groups=6, shared_blocks=3, own_blocks=(0, 1),
                       output_tokens=(16, 32)),
}  # fmt: skip
UP_TIMEOUT_S = 900  # servekit up waits up to its own --ready-timeout (600 s) for the engines
RESET_TRIES = 30  # a reset fails while blocks are held (a request still finishing): retried 1/s
LIVE_BOUND_S = 30.0

BlockWords = Callable[[int], Sequence[str]]
"""A block's ``hash_id`` -> its 512 words, each one token of the engine's tokenizer."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Sample(NamedTuple):
    """One request as the client saw it; ``error`` is empty when it succeeded."""

    ttft_s: float
    tpot_s: float
    error: str = ""


@dataclass
class Result:
    router: str
    requests: int
    errors: int
    hit_rate: float | None
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    goodput_rps: float
    duration_s: float
    router_cpu_s: float = 0.0
    engines_cpu_s: float = 0.0
    note: str = ""


@dataclass(frozen=True)
class Backends:
    """The engines every router is put in front of: PD stages, or replicas (no PD)."""

    model: str
    prefill: tuple[str, ...] = ()
    decode: tuple[str, ...] = ()
    replicas: tuple[str, ...] = ()
    events: Mapping[str, str] = field(default_factory=dict)
    """Engine URL -> its KV-event publisher, ``tcp://HOST:PORT``."""
    block_size: int | None = None
    """The engines' KV block size, for vllm-router's kv_aware (its default is 16)."""

    @property
    def first_stage(self) -> tuple[str, ...]:
        """The engines whose prefix caches a request meets first: the hit rate's."""
        return self.replicas or self.prefill

    @property
    def all(self) -> tuple[str, ...]:
        return self.prefill + self.decode + self.replicas


def sim_words(hash_id: int) -> list[str]:
    """512 one-token words, the same wherever ``hash_id`` appears (the sim: a word a token)."""
    return [f"h{hash_id}w{j}" for j in range(MOONCAKE_BLOCK)]


def prompt_of(req: Any, tag: str, words_of: BlockWords = sim_words) -> str:
    words = [w for h in req.hash_ids for w in words_of(h)][: max(1, req.input_tokens - 1)]
    return tag + " " + " ".join(words) if not req.hash_ids else " ".join(words)


@contextlib.contextmanager
def process(
    argv: list[str], log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # fmt: skip
        try:
            yield proc
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


async def wait_ready(url: str, path: str = "/health", bound_s: float = 120.0) -> None:
    deadline = time.monotonic() + bound_s
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                async with s.get(url + path, timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.3)
    raise RuntimeError(f"{url}{path} never answered 200")


_STATE = re.compile(r"^servekit_proxy_kv_events_state\{([^}]*)\} ([0-9.]+)$")


def feeds_live(text: str, engines: Sequence[str]) -> bool:
    """Every engine's feed is live in every proxy process of the page (``--workers``: each
    worker's series carry ``proxy_worker``)."""
    live: dict[str, set[str]] = {}
    workers: set[str] = set()
    for line in text.splitlines():
        m = _STATE.match(line)
        if m is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        worker = labels.get("proxy_worker", "")
        workers.add(worker)
        if labels.get("state") == "live" and float(m.group(2)) == 1.0:
            live.setdefault(labels.get("engine", ""), set()).add(worker)
    return bool(workers) and all(live.get(u, set()) >= workers for u in engines)


async def wait_feeds_live(proxy: str, engines: Sequence[str]) -> None:
    """Until servekit's proxy reports every engine's KV-event feed ``live`` (subscribed and
    connected): a kv-events row measured before that would be routed by load alone."""
    deadline = time.monotonic() + LIVE_BOUND_S
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            async with s.get(proxy + "/metrics") as r:
                text = await r.text()
            if feeds_live(text, engines):
                return
            await asyncio.sleep(0.5)
    raise RuntimeError(f"the proxy's KV-event feeds were not all live after {LIVE_BOUND_S:.0f} s")


_METRIC = re.compile(r"^(vllm:prefix_cache_(?:hits|queries))(?:_total)?(?:\{[^}]*\})? ([0-9.e+]+)$")


async def prefix_counts(urls: Sequence[str]) -> tuple[float, float]:
    hits = queries = 0.0
    async with aiohttp.ClientSession() as s:
        for url in urls:
            async with s.get(url + "/metrics") as r:
                for line in (await r.text()).splitlines():
                    m = _METRIC.match(line)
                    if m and m.group(1).endswith("hits"):
                        hits += float(m.group(2))
                    elif m:
                        queries += float(m.group(2))
    return hits, queries


async def replay(
    target: str, model: str, trace: Any, speed: float, words_of: BlockWords
) -> tuple[list[Sample], float]:
    """Send each request at its trace time; one Sample per request, and the span."""
    tag = os.urandom(3).hex()
    bodies = [
        {"model": model, "prompt": prompt_of(r, tag, words_of), "max_tokens": r.output_tokens,
         "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
        for r in trace.requests
    ]  # fmt: skip
    out: list[Sample] = []
    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as s:

        async def one(body: dict[str, Any], at: float) -> None:
            await asyncio.sleep(max(0.0, at - (time.monotonic() - t0)))
            sent = time.monotonic()
            first = last = None
            tokens = 0
            try:
                async with s.post(target + "/v1/completions", json=body) as r:
                    if r.status != 200:
                        out.append(Sample(0.0, 0.0, f"HTTP {r.status}"))
                        return
                    async for line in r.content:
                        if not line.startswith(b"data: {"):
                            continue
                        doc = json.loads(line[6:])
                        if doc.get("choices") and doc["choices"][0].get("text"):
                            now = time.monotonic()
                            first = first or now
                            last = now
                        if doc.get("usage"):
                            tokens = doc["usage"].get("completion_tokens", tokens)
            except (aiohttp.ClientError, TimeoutError) as exc:
                out.append(Sample(0.0, 0.0, type(exc).__name__))
                return
            if first is None or last is None:
                out.append(Sample(0.0, 0.0, "no text streamed"))
                return
            tpot = (last - first) / (tokens - 1) if tokens > 1 else 0.0
            out.append(Sample(first - sent, tpot))

        t0 = time.monotonic()
        await asyncio.gather(*(one(b, r.at_s / speed) for b, r in zip(bodies, trace.requests,
                                                                        strict=True)))  # fmt: skip
        span = time.monotonic() - t0
    return out, span


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def error_note(rows: list[Sample]) -> str:
    """The failed requests' causes, most frequent first: the table says why, not just how many."""
    why = Counter(r.error for r in rows if r.error)
    if not why:
        return ""
    causes = ", ".join(f"{n} x {cause}" for cause, n in why.most_common(3))
    return f"{sum(why.values())} failed ({causes}); latencies cover the rest"


def summarize(name: str, rows: list[Sample], span: float, hits: float | None,
              slo: tuple[float, float], *, note: str = "") -> Result:  # fmt: skip
    ok = [r for r in rows if not r.error]
    ttft = [r.ttft_s * 1000 for r in ok]
    tpot = [r.tpot_s * 1000 for r in ok]
    good = sum(1 for r in ok if r.ttft_s * 1000 <= slo[0] and r.tpot_s * 1000 <= slo[1])
    note = "; ".join(n for n in (note, error_note(rows)) if n)
    return Result(name, len(rows), len(rows) - len(ok), hits, pct(ttft, 0.5), pct(ttft, 0.99),
                  pct(tpot, 0.5), pct(tpot, 0.99), good / span, span, note=note)  # fmt: skip


def servekit_argv(name: str, port: int, b: Backends) -> list[str]:
    """servekit's proxy with policy ``name`` (PREFILL[/DECODE][@WEIGHT][*WORKERS]; replicas:
    the decode one's; ``@WEIGHT``: its ``--kv-overlap-weight``, so weights compare in one run;
    ``*WORKERS``: its ``--workers``, each worker routing on its own view)."""
    name, _, workers = name.partition("*")
    policies, _, weight = name.partition("@")
    pre, _, dec = policies.partition("/")
    argv = [sys.executable, "-m", "servekit.proxy", "--port", str(port), "--log-level", "warning"]
    if b.replicas:
        argv += ["--replica", *b.replicas, "--decode-policy", dec or pre]
    else:
        argv += ["--prefill", *b.prefill, "--decode", *b.decode, "--prefill-policy", pre,
                 "--decode-policy", dec or pre]  # fmt: skip
    if KV_POLICY in name:
        argv += ["--kv-events", *(f"{u}={e}" for u, e in b.events.items())]
    if weight:
        argv += ["--kv-overlap-weight", weight]
    if workers:
        argv += ["--workers", workers]
    return argv


def vllm_router_argv(binary: str, policy: str, port: int, b: Backends) -> list[str]:
    """vllm-router with ``policy``: regular mode over replicas, else its vLLM PD mode."""
    argv = [binary, "--host", "127.0.0.1", "--port", str(port),
            "--prometheus-port", str(free_port()), "--policy", policy]  # fmt: skip
    kv_aware = policy == "kv_aware"
    if b.replicas:
        argv += ["--worker-urls", *b.replicas]
        for u, e in b.events.items() if kv_aware else ():
            argv += ["--kv-event-source", f"{u}={e}"]
        if kv_aware and b.block_size is not None:
            argv += ["--kv-event-block-size", str(b.block_size)]
        if kv_aware and b.events:  # static sources name no model: without it /health never
            argv += ["--kv-event-model", b.model]  # answered 200 (stop 40's real run)
        return argv
    argv.append("--vllm-pd-disaggregation")
    for u in b.prefill:
        argv += ["--prefill", u]
    for u in b.decode:
        argv += ["--decode", u]
    for u, e in b.events.items() if kv_aware else ():
        argv += ["--pd-kv-events", f"{u}={e}"]
    return argv


VLLM_ROUTER = "vllm-router "  # its rows are named "vllm-router POLICY"


def slug(name: str) -> str:
    """A router's name as a log file's."""
    return name.replace("/", "+").replace(" ", "-")


def router_argv(name: str, port: int, b: Backends, vllm_router: str) -> list[str]:
    if name.startswith(VLLM_ROUTER):
        return vllm_router_argv(vllm_router, name.removeprefix(VLLM_ROUTER), port, b)
    return servekit_argv(name, port, b)


@dataclass(frozen=True)
class Setup:
    """What every router's run shares."""

    args: argparse.Namespace
    trace: Any
    work: Path
    backends: Backends
    words_of: BlockWords
    engines_cpu_s: Callable[[], float]


def router_cpu_s(pid: int) -> float:
    """CPU seconds of the router and every process below it (``--workers``) so far."""
    total = 0.0
    for p in members({pid}):
        with contextlib.suppress(OSError):
            total += cpu_seconds_of(p)
    return total


async def measure(name: str, setup: Setup) -> Result:
    """Router ``name`` started in front of the engines, fed the trace, read, and stopped."""
    args, b = setup.args, setup.backends
    port = free_port()
    target = f"http://127.0.0.1:{port}"
    argv = router_argv(name, port, b, args.vllm_router)
    before = await prefix_counts(b.first_stage)
    with process(argv, setup.work / f"router-{slug(name)}.log") as router:
        await wait_ready(target)
        await asyncio.sleep(2.0)  # subscribers connect; health probes admit every engine
        if KV_POLICY in name and not name.startswith(VLLM_ROUTER):
            await wait_feeds_live(target, list(b.events))
        cpu0 = router_cpu_s(router.pid), setup.engines_cpu_s()
        rows, span = await replay(target, b.model, setup.trace, args.trace_speed, setup.words_of)
        cpu1 = router_cpu_s(router.pid), setup.engines_cpu_s()
    after = await prefix_counts(b.first_stage)
    queries = after[1] - before[1]
    res = summarize(name, rows, span, (after[0] - before[0]) / queries if queries else None,
                    (args.slo_ttft_ms, args.slo_tpot_ms))  # fmt: skip
    res.router_cpu_s, res.engines_cpu_s = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    return res


async def compare(names: list[str], one: Callable[[str], Awaitable[Result]]) -> list[Result]:
    results: list[Result] = []
    for name in names:
        try:
            res = await one(name)
        except Exception as exc:  # one router failing does not hide the others' figures
            res = summarize(name, [], 1.0, None, (0, 0), note=f"failed: {exc}")
        results.append(res)
        print(json.dumps(asdict(res)), flush=True)
    return results


# --- the simulator ---------------------------------------------------------------------


def sim_spec(layout: str, work: Path) -> tuple[Path, Backends]:
    """The layout's SimSpec with KV events on every prefill endpoint."""
    path = layout_sim_spec(layout, work / "sim.json")
    doc = json.loads(path.read_text())
    prefill, decode, events = [], [], {}
    for ep in doc["endpoints"]:
        url = f"http://127.0.0.1:{ep['port']}"
        ep["host"] = "127.0.0.1"
        if ep["role"] == "prefill":
            pub = f"tcp://127.0.0.1:{free_port()}"
            ep["kv_events"] = {"endpoint": pub}
            events[url] = pub
            prefill.append(url)
        else:
            decode.append(url)
    path.write_text(json.dumps(doc))
    model = doc["endpoints"][0][MODEL_KEY]
    return path, Backends(model, tuple(prefill), tuple(decode), events=events)


async def sim_run(name: str, args: argparse.Namespace, trace: Any, work: Path) -> Result:
    """Router ``name`` in front of a fresh simulator (cold caches)."""
    spec, backends = sim_spec(args.layout, work)
    sim_argv = [sys.executable, "-m", "servekit.sim", "--spec", str(spec), "--speed",
                str(args.speed)]  # fmt: skip
    with process(sim_argv, work / f"sim-{slug(name)}.log") as sim:
        for u in backends.all:
            await wait_ready(u)
        setup = Setup(args, trace, work, backends, sim_words, lambda: cpu_seconds_of(sim.pid))
        return await measure(name, setup)


# --- real vLLM CPU engines -------------------------------------------------------------


@dataclass(frozen=True)
class VllmRun:
    """A layout up on real vLLM CPU engines: where its engines are, and their processes."""

    backends: Backends
    engine_pids: tuple[int, ...]

    def engines_cpu_s(self) -> float:
        """CPU seconds of every process of every engine (API server, engine core) so far."""
        total = 0.0
        for pid in members(set(self.engine_pids)):
            with contextlib.suppress(OSError):
                total += cpu_seconds_of(pid)
        return total


def one_token_words(tokenizer: Any) -> list[str]:
    """Alphabetic words that are one token of ``tokenizer`` alone and after a space, sorted
    (vocabulary keys are byte-level strings: a leading space shows as a non-ASCII letter)."""
    return sorted(
        w for w in tokenizer.get_vocab()
        if w.isascii() and w.isalpha()
        and len(tokenizer.encode(w).ids) == 1 and len(tokenizer.encode(" " + w).ids) == 1
    )  # fmt: skip


def vocab_words(pool: list[str]) -> BlockWords:
    """Block ``hash_id`` -> 512 words drawn from ``pool`` seeded by the id (no two blocks of a
    trace share their first engine block of words, so no hit comes from a coincidence)."""

    @functools.cache
    def words_of(hash_id: int) -> tuple[str, ...]:
        # a string seed: an int seed is taken by its absolute value, so -1 would be block 1
        return tuple(random.Random(f"block {hash_id}").choices(pool, k=MOONCAKE_BLOCK))

    return words_of


def tiny_words(layout: Any, work: Path, trace: Any) -> BlockWords:
    """The tiny model built in ``work`` (as ``servekit up`` would), and the trace's words in its
    tokenizer, checked: every prompt is exactly one token a word."""
    from tokenizers import Tokenizer

    ensure_tiny_model(layout, work)
    tokenizer = Tokenizer.from_file(str(work / layout.model.path / "tokenizer.json"))
    words_of = vocab_words(one_token_words(tokenizer))
    for req in trace.requests:
        prompt = prompt_of(req, "", words_of)
        if len(tokenizer.encode(prompt).ids) != len(prompt.split()):
            raise SystemExit(f"a prompt of the trace is not one token a word: {prompt[:80]!r}")
    return words_of


def check_vllm_layout(layout: Any, trace: Any) -> None:
    """What the vLLM mode relies on, before anything starts: a replica layout serving the
    tiny model, whose context holds every request's prompt and answer."""
    if not serves_tiny_model(layout) or layout.proxy is None or layout.proxy.mode != "replica":
        raise SystemExit(f"{layout.name}: --engine vllm needs a CPU layout of tiny-model "
                         "replicas behind the proxy (local/dp2)")  # fmt: skip
    worst = max(r.input_tokens + r.output_tokens for r in trace.requests)
    if worst > layout.model.max_model_len:
        raise SystemExit(f"the trace's longest request needs {worst} tokens, over "
                         f"max_model_len {layout.model.max_model_len}: lower --shared-blocks")  # fmt: skip


def servekit_cli(*argv: str, work: Path, env: dict[str, str], timeout: float) -> None:
    """``python -m servekit ARGV`` in ``work``; its output goes to ``work/servekit.log``.

    Its own session, so a Ctrl-C meant for this script does not stop it half-way: the
    script's teardown runs ``servekit down`` itself.
    """
    log = work / "servekit.log"
    with log.open("ab") as out:
        done = subprocess.run([sys.executable, "-m", "servekit", *argv], cwd=work, env=env,
                              stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                              start_new_session=True, check=False)  # fmt: skip
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"servekit {' '.join(argv)} exited {done.returncode}:\n{tail}")


def read_run(run_dir: Path) -> VllmRun:
    """The engines of a ready run, as its own proxy sees them (its plan's proxy facts)."""
    plan = Plan.model_validate_json((run_dir / "plan.json").read_text())
    facts = plan.process(plan.entry).proxy
    if facts is None or not facts.replica or not facts.kv_events:
        raise SystemExit(
            f"{plan.layout}: no replicas publishing KV events in its proxy (KV_EVENTS=0?)"
        )
    state = read_state(run_dir / "state.json")
    if state is None:
        raise RuntimeError(f"{run_dir}: no state.json")
    pids = tuple(p.pid for p in state.processes if p.kind == "engine" and p.pid is not None)
    events = {url: pub for url, _, pub in (e.partition("=") for e in facts.kv_events)}
    backends = Backends(plan.served_model_name, replicas=facts.replica, events=events)
    return VllmRun(backends, pids)


@contextlib.contextmanager
def vllm_engines(layout: str, work: Path) -> Iterator[VllmRun]:
    """``layout`` up on real vLLM in ``work``; always brought down on the way out."""
    env = {**os.environ, "SERVEKIT_RUNS": str(work / "runs"), "VLLM_SERVER_DEV_MODE": "1"}
    try:
        print(f"starting {layout} on vLLM (servekit up; a minute or two)", flush=True)
        servekit_cli("up", layout, "--engine", "vllm", "--detach", "--free-ports", work=work,
                     env=env, timeout=UP_TIMEOUT_S)  # fmt: skip
        yield read_run(work / "runs" / layout.replace("/", "__"))
    finally:
        try:
            servekit_cli("down", layout, work=work, env=env, timeout=300)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"servekit down {layout} failed, stop it by hand: {exc}", file=sys.stderr)


_BLOCK_SIZE = re.compile(r'^vllm:cache_config_info\{[^}]*\bblock_size="(\d+)"', re.MULTILINE)


async def engine_block_size(url: str) -> int | None:
    """The engine's KV block size, from its ``vllm:cache_config_info`` metric."""
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        found = _BLOCK_SIZE.search(await r.text())
    return int(found.group(1)) if found else None


async def post_json(url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"POST {url}: HTTP {r.status}: {(await r.text())[:200]}")
        doc: dict[str, Any] = await r.json()
        return doc


async def check_engine_tokens(run: VllmRun, prompt: str) -> None:
    """The engine's own tokenizer gives ``prompt`` one token a word, as the file did."""
    url = run.backends.replicas[0]
    doc = await post_json(url + "/tokenize", {"model": run.backends.model, "prompt": prompt})
    if doc.get("count") != len(prompt.split()):
        raise RuntimeError(f"{url}/tokenize: {doc.get('count')} tokens for "
                           f"{len(prompt.split())} words; prefixes would not line up")  # fmt: skip


async def warm_up(run: VllmRun, prompt: str) -> None:
    """One request to each engine, so the first router does not pay first-request costs."""
    for url in run.backends.replicas:
        body = {"model": run.backends.model, "prompt": prompt, "max_tokens": 8}
        await post_json(url + "/v1/completions", body)


async def reset_prefix_caches(urls: Sequence[str]) -> None:
    """Every engine's prefix cache emptied (vLLM refuses while a request holds blocks: retried)."""
    for url in urls:
        for _ in range(RESET_TRIES):
            async with aiohttp.ClientSession() as s, s.post(url + "/reset_prefix_cache") as r:
                if r.status == 404:
                    raise RuntimeError(f"{url} has no /reset_prefix_cache (VLLM_SERVER_DEV_MODE)")
                if r.status == 200 and (await r.json()).get("success"):
                    break
            await asyncio.sleep(1.0)
        else:
            raise RuntimeError(f"{url}: prefix cache not reset after {RESET_TRIES} tries")


async def vllm_compare(names: list[str], setup: Setup, run: VllmRun) -> list[Result]:
    """Each router in front of the run's engines, their prefix caches emptied before each."""
    probe = " ".join(setup.words_of(-1))  # no trace block has a negative id
    await check_engine_tokens(run, probe)
    await warm_up(run, probe)
    block = await engine_block_size(run.backends.replicas[0])
    print(f"engines {', '.join(run.backends.replicas)}: KV block size {block}", flush=True)
    setup = dataclasses.replace(setup, backends=dataclasses.replace(setup.backends,
                                                                    block_size=block))  # fmt: skip

    async def one(name: str) -> Result:
        await reset_prefix_caches(run.backends.replicas)
        return await measure(name, setup)

    return await compare(names, one)


# --- the command -----------------------------------------------------------------------


def table(results: list[Result]) -> str:
    head = ("| router | prefix hit rate | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms "
            "| goodput req/s | errors | router CPU s | engines CPU s | note |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n")  # fmt: skip
    rows = [
        f"| {r.router} | {'-' if r.hit_rate is None else f'{r.hit_rate:.1%}'} | "
        f"{r.ttft_p50_ms:.0f} | {r.ttft_p99_ms:.0f} | {r.tpot_p50_ms:.1f} | {r.tpot_p99_ms:.1f} "
        f"| {r.goodput_rps:.2f} | {r.errors}/{r.requests} | {r.router_cpu_s:.1f} "
        f"| {r.engines_cpu_s:.1f} | {r.note or '-'} |"
        for r in results
    ]
    return head + "\n".join(rows)


def default_vllm_router() -> str:
    """vllm-router on PATH, else beside this Python (a venv's bin, not activated)."""
    beside = Path(sys.executable).parent / "vllm-router"
    return shutil.which("vllm-router") or (str(beside) if beside.is_file() else "")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", choices=("sim", "vllm"), default="sim",
                   help="sim: a simulator per router; vllm: real vLLM CPU engines via servekit up")  # fmt: skip
    p.add_argument("--layout", help=f"default {LAYOUTS['sim']} (sim), {LAYOUTS['vllm']} (vllm)")
    shape = "default {sim} (sim), {vllm} (vllm)"
    for flag, key in (("--requests", "requests"), ("--rate", "rate"), ("--groups", "groups"),
                      ("--shared-blocks", "shared_blocks")):  # fmt: skip
        kind = float if key == "rate" else int
        values = {mode: getattr(s, key) for mode, s in SHAPES.items()}
        p.add_argument(flag, type=kind, help=shape.format(**values))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--speed", type=float, default=1.0, help="the simulator's --speed (sim only)")
    p.add_argument("--trace-speed", type=float, default=1.0)
    p.add_argument("--slo-ttft-ms", type=float, default=2000.0)
    p.add_argument("--slo-tpot-ms", type=float, default=100.0)
    p.add_argument("--policies", default="round-robin,least-loaded,prefix-affinity,kv-events",
                   help="servekit's policies, PREFILL[/DECODE][@KV_OVERLAP_WEIGHT][*WORKERS] each "
                   "(replicas: the second)")  # fmt: skip
    p.add_argument("--vllm-router", default=default_vllm_router())
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    args.layout = args.layout or LAYOUTS[args.engine]
    return args


def trace_shape(args: argparse.Namespace) -> TraceShape:
    """The engine mode's shape, with whatever the command line gave."""
    keys = ("requests", "rate", "groups", "shared_blocks")
    given = {k: getattr(args, k) for k in keys if getattr(args, k) is not None}
    return dataclasses.replace(SHAPES[args.engine], seed=args.seed, **given)


def run_vllm(names: list[str], args: argparse.Namespace, trace: Any, work: Path) -> list[Result]:
    """The comparison on real vLLM; the engines are checked for what the figures rely on."""
    layout = load(args.layout).layout
    check_vllm_layout(layout, trace)
    words_of = tiny_words(layout, work, trace)
    with vllm_engines(args.layout, work) as run:
        setup = Setup(args, trace, work, run.backends, words_of, run.engines_cpu_s)
        return asyncio.run(vllm_compare(names, setup, run))


def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a kill tears down as Ctrl-C does
    work = Path(tempfile.mkdtemp(prefix="kvroute-"))
    trace = read_trace(write_trace(work / "trace.jsonl", trace_shape(args)))
    print(f"trace: {len(trace.requests)} requests over {trace.span_s:.1f} s; a perfect cache "
          f"hits {trace_hit_rate(trace):.1%} of prompt tokens; logs in {work}", flush=True)  # fmt: skip
    names = [n for n in args.policies.split(",") if n]
    if args.vllm_router:
        names += [VLLM_ROUTER + "cache_aware", VLLM_ROUTER + "kv_aware"]
    if args.engine == "vllm":
        results = run_vllm(names, args, trace, work)
    else:
        results = asyncio.run(compare(names, lambda n: sim_run(n, args, trace, work)))
    if not args.vllm_router:
        print("vllm-router not installed (pip install vllm-router): its rows are missing")
    print(table(results))
    if any(r.errors or r.note.startswith("failed") for r in results):
        print("some routers had errors (errors and note columns): their figures are partial")
    if args.out:
        args.out.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")


if __name__ == "__main__":
    main()
