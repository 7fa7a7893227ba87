"""Cache-aware routing on a trace, side by side: servekit's policies and vllm-router's.

    .venv/bin/python benchmarks/kv_routing_trace.py [--layout a3/deepseekv4-flash/2p2d]
        [--requests 300] [--rate 10] [--groups 16] [--shared-blocks 4] [--speed 1]
        [--slo-ttft-ms 2000] [--slo-tpot-ms 100] [--out kv_routing.json]

One run per router, each in front of a fresh simulator serving the layout's
engines (cold caches, same ports, same trace): servekit's proxy with
round-robin, least-loaded, prefix-affinity and kv-events (every prefill engine
started with KV events), then vllm-router (PyPI ``vllm-router``, installed by
hand: ``pip install vllm-router``; skipped with a note when absent) with its
``cache_aware`` policy and, when it accepts them, its ``kv_aware`` policy fed by
the same events. The trace is Mooncake-format, generated from a seed
(:mod:`servekit.bench.tracegen`: Poisson arrivals, groups sharing their
leading 512-token blocks); prompts are built so each ``hash_id`` is the same
512 tokens wherever it appears, and each request streams exactly its
``output_length`` tokens (``ignore_eos``).

Per run: the prefix-cache hit rate of the prefill engines (their
``vllm:prefix_cache_hits`` over ``vllm:prefix_cache_queries``, tokens), TTFT
p50/p99, TPOT p50/p99, errors, and goodput (requests per second meeting both
SLOs). Open loop: request k is sent at its trace time whatever came back.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from servekit.bench.trace import read_trace
from servekit.bench.tracegen import TraceShape, write_trace
from servekit.bench.workloads.trace import trace_hit_rate
from servekit.local.simrun import layout_sim_spec

MODEL_KEY = "served_model_name"
MOONCAKE_BLOCK = 512


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
    sim_cpu_s: float = 0.0
    note: str = ""


def block_text(hash_id: int) -> str:
    """512 one-token words, the same wherever ``hash_id`` appears (the sim: a word a token)."""
    return " ".join(f"h{hash_id}w{j}" for j in range(MOONCAKE_BLOCK)) + " "


def prompt_of(req: Any, tag: str) -> str:
    blocks = [block_text(h) for h in req.hash_ids]
    text = "".join(blocks)
    words = text.split()[: max(1, req.input_tokens - 1)]
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


_METRIC = re.compile(r"^(vllm:prefix_cache_(?:hits|queries))(?:_total)?(?:\{[^}]*\})? ([0-9.e+]+)$")


async def prefix_counts(urls: list[str]) -> tuple[float, float]:
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
    target: str, model: str, trace: Any, speed: float, slo: tuple[float, float]
) -> tuple[list[tuple[float, float, bool]], float]:
    """Send each request at its trace time; (ttft_s, tpot_s, ok) per request, and the span."""
    tag = os.urandom(3).hex()
    bodies = [
        {"model": model, "prompt": prompt_of(r, tag), "max_tokens": r.output_tokens,
         "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
        for r in trace.requests
    ]  # fmt: skip
    out: list[tuple[float, float, bool]] = []
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
                        out.append((0.0, 0.0, False))
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
            except (aiohttp.ClientError, TimeoutError):
                out.append((0.0, 0.0, False))
                return
            if first is None or last is None:
                out.append((0.0, 0.0, False))
                return
            tpot = (last - first) / (tokens - 1) if tokens > 1 else 0.0
            out.append((first - sent, tpot, True))

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


def summarize(name: str, rows: list[tuple[float, float, bool]], span: float,
              hits: float | None, slo: tuple[float, float],
    *, note: str = "") -> Result:  # fmt: skip
    ok = [r for r in rows if r[2]]
    ttft = [r[0] * 1000 for r in ok]
    tpot = [r[1] * 1000 for r in ok]
    good = sum(1 for r in ok if r[0] * 1000 <= slo[0] and r[1] * 1000 <= slo[1])
    return Result(name, len(rows), len(rows) - len(ok), hits, pct(ttft, 0.5), pct(ttft, 0.99),
                  pct(tpot, 0.5), pct(tpot, 0.99), good / span, span, note=note)  # fmt: skip


def sim_spec(layout: str, work: Path) -> tuple[Path, list[str], list[str], dict[str, str], str]:
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
    return path, prefill, decode, events, doc["endpoints"][0][MODEL_KEY]


async def one_run(name: str, args: argparse.Namespace, trace: Any, work: Path,
                  router_argv: list[str] | None) -> Result:  # fmt: skip
    spec, prefill, decode, events, model = sim_spec(args.layout, work)
    slo = (args.slo_ttft_ms, args.slo_tpot_ms)
    port = free_port()
    target = f"http://127.0.0.1:{port}"
    sim_argv = [
        sys.executable,
        "-m",
        "servekit.sim",
        "--spec",
        str(spec),
        "--speed",
        str(args.speed),
    ]
    if router_argv is None:  # servekit's proxy
        pre, _, dec = name.partition("/")  # PREFILL[/DECODE] policy names
        argv = [sys.executable, "-m", "servekit.proxy", "--port", str(port), "--prefill", *prefill,
                "--decode", *decode, "--prefill-policy", pre, "--decode-policy",
                dec or pre, "--log-level", "warning"]  # fmt: skip
        if "kv-events" in name:
            argv += ["--kv-events", *(f"{u}={e}" for u, e in events.items())]
        health = "/health"
    else:
        argv = [*router_argv, "--host", "127.0.0.1", "--port", str(port),
                "--prometheus-port", str(free_port()), "--vllm-pd-disaggregation"]  # fmt: skip
        for u in prefill:
            argv += ["--prefill", u]
        for u in decode:
            argv += ["--decode", u]
        if name.endswith("kv_aware"):
            argv += ["--policy", "kv_aware"]
            for u, e in events.items():
                argv += ["--pd-kv-events", f"{u}={e}"]
        else:
            argv += ["--policy", "cache_aware"]
        health = "/health"
    with process(sim_argv, work / f"sim-{name.replace('/', '+')}.log") as sim:
        for u in prefill + decode:
            await wait_ready(u)
        with process(argv, work / f"router-{name.replace('/', '+')}.log") as router:
            await wait_ready(target, health)
            await asyncio.sleep(2.0)  # subscribers connect; health probes admit every engine
            cpu0 = cpu_s(router.pid), cpu_s(sim.pid)
            rows, span = await replay(target, model, trace, args.trace_speed, slo)
            cpu1 = cpu_s(router.pid), cpu_s(sim.pid)
            hits, queries = await prefix_counts(prefill)
    res = summarize(name, rows, span, hits / queries if queries else None, slo)
    res.router_cpu_s, res.sim_cpu_s = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    return res


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def table(results: list[Result]) -> str:
    head = ("| router | prefix hit rate | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms "
            "| goodput req/s | errors | router CPU s | sim CPU s |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n")  # fmt: skip
    rows = [
        f"| {r.router} | {'-' if r.hit_rate is None else f'{r.hit_rate:.1%}'} | "
        f"{r.ttft_p50_ms:.0f} | {r.ttft_p99_ms:.0f} | {r.tpot_p50_ms:.1f} | {r.tpot_p99_ms:.1f} "
        f"| {r.goodput_rps:.2f} | {r.errors}/{r.requests} | {r.router_cpu_s:.1f} "
        f"| {r.sim_cpu_s:.1f} |"
        for r in results
    ]
    return head + "\n".join(rows)


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layout", default="a3/deepseekv4-flash/2p2d")
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--rate", type=float, default=10.0)
    p.add_argument("--groups", type=int, default=16)
    p.add_argument("--shared-blocks", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--speed", type=float, default=1.0, help="the simulator's --speed")
    p.add_argument("--trace-speed", type=float, default=1.0)
    p.add_argument("--slo-ttft-ms", type=float, default=2000.0)
    p.add_argument("--slo-tpot-ms", type=float, default=100.0)
    p.add_argument("--policies", default="round-robin,least-loaded,prefix-affinity,kv-events",
                   help="servekit's policies, PREFILL[/DECODE] each")  # fmt: skip
    p.add_argument("--vllm-router", default=shutil.which("vllm-router") or "")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kvroute-"))
    shape = TraceShape(requests=args.requests, rate=args.rate, groups=args.groups,
                       shared_blocks=args.shared_blocks, own_blocks=(0, 2),
                       output_tokens=(8, 64), seed=args.seed)  # fmt: skip
    trace = read_trace(write_trace(work / "trace.jsonl", shape))
    print(f"trace: {len(trace.requests)} requests over {trace.span_s:.1f} s; a perfect cache "
          f"hits {trace_hit_rate(trace):.1%} of prompt tokens; logs in {work}", flush=True)  # fmt: skip
    results: list[Result] = []
    runs: list[tuple[str, list[str] | None]] = [(n, None) for n in args.policies.split(",") if n]
    if args.vllm_router:
        runs += [("vllm-router cache_aware", [args.vllm_router]),
                 ("vllm-router kv_aware", [args.vllm_router])]  # fmt: skip
    for name, router in runs:
        try:
            res = await one_run(name, args, trace, work, router)
        except Exception as exc:  # one router failing does not hide the others' figures
            res = summarize(name, [], 1.0, None, (0, 0), note=f"failed: {exc}")
        results.append(res)
        print(json.dumps(asdict(res)), flush=True)
    if not args.vllm_router:
        print("vllm-router not installed (pip install vllm-router): its rows are missing")
    print(table(results))
    if args.out:
        args.out.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
