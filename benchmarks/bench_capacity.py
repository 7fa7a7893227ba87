"""Benchmark (c): how much load the harness itself sustains from one core.

A zero-latency simulator runs in its own process (pinned to the last core when
there are two or more); the harness is pinned to core 0. Measured with the
harness's own load generators (prompts are built before timing):

- open-loop rates: offered vs achieved request rate, dispatch lag (actual start
  minus scheduled start) p50/p99, and harness CPU seconds per request, which
  gives the request rate one core sustains (1 / CPU per request);
- closed loop at C = 1 and C = 100 streams: TTFT p50/p99 as the harness sees
  it, the simulator's own TTFT (its histogram, from request arrival), and the
  difference: the latency added between the two, harness included;
- the harness's event-loop lag during each run (a 10 ms periodic probe): how
  late any stamp could be because the harness itself was busy, i.e. what the
  harness adds to TTFT on top of the network and the server;
- added TTFT at C streams (``--added``): against a paced simulator (a flat
  ``--step-ms`` decode step, so it is never saturated; its CPU share is
  printed to prove it), blocks of the same requests alternate between the
  harness and a raw-socket reference client in the same pinned process (one
  ``asyncio.Protocol`` per connection, request bytes prebuilt, the first
  response chunk holding a token frame stamped in ``data_received``, nothing
  parsed). Both see the same server, network and host; the difference of
  their TTFT percentiles is what the harness adds.

    .venv/bin/python benchmarks/bench_capacity.py [--rates 100,200,400,800] [--streams 100]
    .venv/bin/python benchmarks/bench_capacity.py --added --step-ms 20 --streams 100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import time
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from bench_common import cpu_seconds_of, pin_self, sim_process_pid

from servekit.bench.lag import LoopLagProbe
from servekit.bench.load import (
    arrival_offsets,
    frozen_heap,
    run_at_rate,
    run_concurrent,
    stream_body,
)
from servekit.bench.prompts import PromptBuilder
from servekit.bench.stats import serving_metrics
from servekit.client import OpenAIClient, RequestRecord

TTFT_HIST = "vllm:time_to_first_token_seconds"


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def server_ttft(client: OpenAIClient) -> tuple[float, float]:
    h = (await client.metrics()).histogram(TTFT_HIST)
    return (h.sum, h.count) if h else (0.0, 0.0)


def lag_ms(records: list[RequestRecord], offsets: list[float]) -> list[float]:
    t0 = records[0].t_start_ns
    return [
        ((r.t_start_ns - t0) / 1e9 - off) * 1000 for r, off in zip(records, offsets, strict=True)
    ]


def table(rows: list[dict[str, Any]]) -> None:
    """Print dict rows as aligned columns."""
    cols = list(rows[0])
    width = {c: max(len(c), *(len(fmt(r[c])) for r in rows)) + 2 for c in cols}
    print("".join(c.rjust(width[c]) for c in cols))
    for r in rows:
        print("".join(fmt(r[c]).rjust(width[c]) for c in cols))


def fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


async def rate_row(
    client: OpenAIClient, prompts: list[str], rate: float, osl: int
) -> dict[str, Any]:
    n = min(len(prompts), max(200, int(rate * 2)))
    bodies = [stream_body(p, osl, client.model) for p in prompts[:n]]
    c0 = cpu_s()
    async with LoopLagProbe(0.01).running() as probe:
        recs, dur = await run_at_rate(client, bodies, rate, "constant")
    cpu = cpu_s() - c0
    lags = lag_ms(recs, arrival_offsets(n, rate, "constant", 0))
    ok = sum(r.ok for r in recs)
    return {
        "offered/s": rate,
        "achieved/s": ok / dur,
        "start_lag_p50_ms": float(np.percentile(lags, 50)),
        "start_lag_p99_ms": float(np.percentile(lags, 99)),
        "loop_lag_p99_ms": probe.summary()["loop_lag_p99_ms"],
        "cpu_ms/req": cpu / n * 1000,
        "1core_req/s": n / cpu,
        "errors": n - ok,
    }


async def stream_row(
    client: OpenAIClient, prompts: list[str], c: int, n: int, osl: int
) -> dict[str, Any]:
    bodies = [stream_body(p, osl, client.model) for p in prompts[:n]]
    s0 = await server_ttft(client)
    c0 = cpu_s()
    async with LoopLagProbe(0.01).running() as probe:
        recs, dur = await run_concurrent(client, bodies, c)
    cpu = cpu_s() - c0
    s1 = await server_ttft(client)
    m = serving_metrics(recs, dur, 16, {})
    served = (s1[0] - s0[0]) / max(s1[1] - s0[1], 1) * 1000
    ttfts = [r.ttft_ns / 1e6 for r in recs if r.ok and r.ttft_ns is not None]
    frames = sum(len(r.token_times_ns) for r in recs)
    lag = probe.summary()
    return {
        "C": c,
        "ttft_p50_ms": m["ttft_p50_ms"],
        "ttft_p99_ms": m["ttft_p99_ms"],
        "sim_ttft_mean_ms": served,
        "added_mean_ms": float(np.mean(ttfts)) - served,
        "frames/s": frames / dur,
        "cpu_us/frame": cpu / frames * 1e6,
        "loop_lag_p50_ms": lag["loop_lag_p50_ms"],
        "loop_lag_p99_ms": lag["loop_lag_p99_ms"],
        "errors": int(m["failed"] or 0),
    }


class StallProbe(LoopLagProbe):
    """Loop lag, split by whether this process was running while it was late.

    Each 10 ms tick records how late it woke and how much CPU the process
    used meanwhile. A tick late by more than ``threshold_ms`` whose CPU time
    covers less than half of the lateness was a stall of the host (the
    process was not scheduled); otherwise the loop itself was busy.
    """

    def __init__(self, interval_s: float = 0.01, threshold_ms: float = 5.0) -> None:
        super().__init__(interval_s)
        self.threshold_ms = threshold_ms
        self.host_ms = 0.0
        self.busy_ms = 0.0
        self.host_n = self.busy_n = 0

    async def _loop(self) -> None:
        while True:
            due = time.perf_counter() + self.interval_s
            c0 = time.process_time()
            await asyncio.sleep(self.interval_s)
            late = max(0.0, (time.perf_counter() - due) * 1000)
            cpu = (time.process_time() - c0) * 1000
            self.lags_ms.append(late)
            if late > self.threshold_ms:
                if cpu < (self.interval_s * 1000 + late) / 2:
                    self.host_ms += late
                    self.host_n += 1
                else:
                    self.busy_ms += late
                    self.busy_n += 1


class _RawStream(asyncio.Protocol):
    """One keep-alive connection of the reference client: stamps, parses nothing.

    The first chunk holding a token frame (``"choices":[{``) is stamped in
    ``data_received``; the response ends at chunked encoding's last chunk.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.t_first: int | None = None
        self.tail = b""
        self.done: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter_ns()
        if self.t_first is None and b'"choices":[{' in (self.tail[-16:] + data):
            self.t_first = t
        self.tail = (self.tail + data)[-64:]
        if self.tail.endswith(b"\r\n0\r\n\r\n") and self.done and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done and not self.done.done():
            self.done.set_exception(exc or ConnectionError("closed"))

    async def send(self, request: bytes) -> int | None:
        """Send one prebuilt request; TTFT in ns (None if no token frame came)."""
        assert self.transport is not None
        self.t_first, self.tail = None, b""
        self.done = asyncio.get_running_loop().create_future()
        t0 = time.perf_counter_ns()
        self.transport.write(request)
        await self.done
        return None if self.t_first is None else self.t_first - t0


def raw_request(url: str, body: dict[str, Any]) -> bytes:
    """The HTTP/1.1 bytes of one streamed completion (prebuilt before timing)."""
    u = urlsplit(url)
    data = json.dumps(body, separators=(",", ":")).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {u.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


async def run_reference(
    url: str, bodies: list[dict[str, Any]], c: int, offsets: list[float] | None = None
) -> tuple[list[float], float]:
    """The raw client: (TTFTs in ms, mean requests in flight).

    Closed loop with ``c`` connections, or open loop on ``offsets`` (seconds
    from the start) with ``c`` connections opened beforehand and more on demand.
    """
    u = urlsplit(url)
    host, port = u.hostname or "127.0.0.1", u.port or 80
    loop = asyncio.get_running_loop()

    async def connect() -> _RawStream:
        return (await loop.create_connection(_RawStream, host, port))[1]

    conns = [await connect() for _ in range(c)]
    reqs = [raw_request(url, b) for b in bodies]
    out: list[float] = []
    busy_ns = 0

    async def one(conn: _RawStream, req: bytes) -> None:
        nonlocal busy_ns
        t0 = time.perf_counter_ns()
        ttft = await conn.send(req)
        busy_ns += time.perf_counter_ns() - t0
        if ttft is not None:
            out.append(ttft / 1e6)

    start = time.perf_counter()
    if offsets is None:
        queue = list(reversed(reqs))

        async def worker(conn: _RawStream) -> None:
            while queue:
                await one(conn, queue.pop())

        await asyncio.gather(*(worker(x) for x in conns))
    else:
        idle = list(conns)

        async def dispatch(req: bytes) -> None:
            conn = idle.pop() if idle else await connect()
            await one(conn, req)
            idle.append(conn)

        t0 = loop.time()
        tasks = []
        for req, off in zip(reqs, offsets, strict=True):
            delay = t0 + off - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(dispatch(req)))
        await asyncio.gather(*tasks)
        conns = idle
    duration = time.perf_counter() - start
    for conn in conns:
        if conn.transport is not None:
            conn.transport.close()
    return out, busy_ns / 1e9 / duration


async def run_harness(
    client: OpenAIClient, bodies: list[dict[str, Any]], c: int, rate: float | None = None
) -> tuple[list[float], float]:
    """The harness's own load generators: (TTFTs in ms, mean requests in flight)."""
    if rate is None:
        recs, dur = await run_concurrent(client, bodies, c)
    else:
        recs, dur = await run_at_rate(client, bodies, rate, "poisson", seed=1)
    busy = sum(r.t_end_ns - r.t_start_ns for r in recs) / 1e9 / dur
    return [r.ttft_ns / 1e6 for r in recs if r.ok and r.ttft_ns is not None], busy


async def added_ttft(
    client: OpenAIClient, url: str, sim_pid: int, prompts: list[str], args: argparse.Namespace
) -> None:
    """Harness vs raw reference client, alternating blocks of C streams.

    Open loop (Poisson, the same schedule for both) at the rate that keeps C
    streams in flight on average: in a closed loop each new request is sent
    right after a step's frames arrive, so its wait for the next simulator
    step shrinks by exactly the delay a slower client adds, and the step clock
    hides that delay. Poisson arrivals land at random phases of the step.
    """
    rng = np.random.default_rng(0)
    # Output lengths spread over [osl/2, 3 osl/2] so the C streams do not finish
    # (and restart) in lockstep on the simulator's flat steps.
    lens = rng.integers(max(args.osl // 2, 1), args.osl * 3 // 2 + 1, size=len(prompts))
    bodies = [stream_body(p, int(n), client.model) for p, n in zip(prompts, lens, strict=True)]
    n = args.block
    step_s = args.step_ms / 1000
    rate = args.streams / (float(np.mean(lens)) * step_s) if step_s > 0 else None
    offsets = arrival_offsets(n, rate, "poisson", 1) if rate else None
    print(f"arrivals: Poisson at {rate:.0f} req/s" if rate else "arrivals: closed loop")
    pooled: dict[str, list[float]] = {"reference": [], "harness": []}
    rows: list[dict[str, Any]] = []
    for i in range(args.rounds):
        order = ("reference", "harness") if i % 2 == 0 else ("harness", "reference")
        for tool in order:
            block = bodies[:n]
            bodies = bodies[n:] + block  # rotate: each block its own requests
            s0, w0 = cpu_seconds_of(sim_pid), time.perf_counter()
            probe = StallProbe(0.01)
            async with probe.running():
                if tool == "reference":
                    with frozen_heap():  # as the harness's generators do
                        ttfts, busy = await run_reference(url, block, args.streams, offsets)
                else:
                    ttfts, busy = await run_harness(client, block, args.streams, rate)
            sim_share = (cpu_seconds_of(sim_pid) - s0) / (time.perf_counter() - w0)
            pooled[tool] += ttfts
            lag = probe.summary()
            rows.append(
                {
                    "block": i + 1,
                    "client": tool,
                    "in_flight": busy,
                    "ttft_p50_ms": float(np.percentile(ttfts, 50)),
                    "ttft_p99_ms": float(np.percentile(ttfts, 99)),
                    "loop_lag_p99_ms": lag["loop_lag_p99_ms"],
                    "host_stalls": f"{probe.host_n}/{probe.host_ms:.0f}ms",
                    "busy_stalls": f"{probe.busy_n}/{probe.busy_ms:.0f}ms",
                    "sim_cpu_share": sim_share,
                    "load1": os.getloadavg()[0],
                    "ok": len(ttfts),
                }
            )
    table(rows)
    ref, har = np.asarray(pooled["reference"]), np.asarray(pooled["harness"])
    print(f"\n== added TTFT at C={args.streams} (harness - reference), pooled blocks ==")
    for p in (50, 90, 99):
        r, h = float(np.percentile(ref, p)), float(np.percentile(har, p))
        print(f"TTFT p{p}: reference {r:8.3f} ms   harness {h:8.3f} ms   added {h - r:+7.3f} ms")
    for p in (50, 99):
        key = f"ttft_p{p}_ms"
        diffs = []
        for pair in zip(rows[::2], rows[1::2], strict=True):
            by = {row["client"]: row for row in pair}
            diffs.append(by["harness"][key] - by["reference"][key])
        print(
            f"per-round added p{p}: median {np.median(diffs):+.3f} ms "
            f"(min {min(diffs):+.3f}, max {max(diffs):+.3f}) over {len(diffs)} rounds"
        )
    shares = [r["sim_cpu_share"] for r in rows]
    print(
        f"simulator CPU share {min(shares):.2f}-{max(shares):.2f} of its core; "
        f"requests: reference {len(ref)}, harness {len(har)}; load {os.getloadavg()}"
    )


async def main_async(url: str, sim_pid: int, args: argparse.Namespace) -> None:
    async with OpenAIClient(url, keep_frames=False, keep_body=False) as client:
        await client.resolve_model()
        need = max(args.requests, 200, int(max(args.rates) * 2))
        print(f"building {need} prompts of {args.isl} tokens ...")
        prompts = await PromptBuilder(client).build_many(args.isl, need)
        await run_concurrent(client, [stream_body(p, 4, client.model) for p in prompts[:20]], 4)
        if args.added:
            warm = [stream_body(p, 4, client.model) for p in prompts[:200]]
            await run_reference(url, warm, 100)
            await run_concurrent(client, [stream_body(p, 4, client.model) for p in prompts], 100)
            await added_ttft(client, url, sim_pid, prompts, args)
            return
        print("\n== open-loop request rate (constant arrivals) ==")
        table([await rate_row(client, prompts, r, args.osl) for r in args.rates])
        print("\n== closed loop: TTFT seen by the harness vs by the simulator ==")
        rows = [await stream_row(client, prompts, 1, args.c1_requests, args.osl)]
        rows.append(await stream_row(client, prompts, args.streams, args.requests, args.osl))
        table(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--rates",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[100.0, 200.0, 400.0, 800.0],
    )
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--c1-requests", type=int, default=100, help="requests of the C=1 row")
    ap.add_argument("--isl", type=int, default=16)
    ap.add_argument("--osl", type=int, default=16)
    ap.add_argument("--added", action="store_true", help="only the added-TTFT comparison")
    ap.add_argument("--block", type=int, default=500, help="--added: requests per block")
    ap.add_argument("--rounds", type=int, default=6, help="--added: blocks per client")
    ap.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        help="decode step of the simulator (0: the zero-latency profile)",
    )
    args = ap.parse_args()
    ncpu = os.cpu_count() or 1
    sim_cpus = {ncpu - 1} if ncpu >= 2 else None
    profile: Any = "zero"
    if args.step_ms > 0:
        step = args.step_ms / 1000
        profile = {
            "name": "paced",
            "decode_step_s": [[1, step], [1024, step]],
            "max_num_seqs": 1024,
            "max_num_batched_tokens": 1048576,
        }
    spec = {"endpoints": [{"name": "zero", "port": 0, "profile": profile}]}
    with sim_process_pid(spec, sim_cpus) as (url, pid):
        if ncpu >= 2:
            pin_self({0})
        print(f"harness pinned to core 0, simulator to core {ncpu - 1}; load {os.getloadavg()}")
        asyncio.run(main_async(url, pid, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
