"""Issue 45's proxy probes: the KV-event feed and the engine-metrics relay (before/after).

Run through ``benchmarks/proxy_hardening.py PROBE [--proxy-src DIR]``; each
probe starts one proxy process from ``--proxy-src`` (so the same script
measures an older tree) in front of stub engines in this process, and a ZMQ
publisher here for the kv-events policy (vLLM's wire format, written with
:mod:`servekit.kvschema` from this tree). Loopback only.

- ``kv-hashes``: 120 batches of one ``BlockStored`` whose block hash is 4 MB,
  paced so each is handled before the next; the proxy's RSS growth and what
  its ``/metrics`` counted.
- ``kv-burst``: 150 valid 3.8 MB batches (a block whose ``extra_keys`` is 3.8
  MB) sent at once; the proxy's peak RSS over its start.
- ``kv-prompt``: the publisher announces block size ``--block-size`` (1 or
  16), then one completion request whose prompt is 5.7 MB of token ids; the
  slowest ``/health`` probe while it is routed (two probing clients, every 20
  ms each).
- ``engine-metrics``: 40 concurrent ``GET /metrics/engines`` over 4 engines
  with 80 KB pages (the slowest ``/health`` meanwhile), then 2 GETs over one
  engine whose page is 10 MB (the proxy's RSS growth); ``--proxy-flag`` adds
  flags to those proxies (``--proxy-flag=--max-engine-metrics-bytes=16777216``).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

import msgspec
import zmq
from aiohttp import web
from proxy_hardening_common import (
    PULL_PARAMS,
    free_port,
    head,
    peak_rss_mb,
    rss_mb,
    serve_on_loopback,
    start_proxy_process,
    timed_health,
)

from servekit.kvschema import seq_frame, struct_types

WIRE = struct_types("write")


def batch(*events: Any) -> bytes:
    return msgspec.msgpack.encode(WIRE["EventBatch"](time.time(), list(events), 0))


def stored(hashes: list[Any], tokens: list[int], size: int, extra: Any = None) -> Any:
    event = WIRE["BlockStored"](hashes, None, tokens, size, None, "GPU", None)
    event.extra_keys = extra
    return event


async def pd_engine() -> tuple[str, web.AppRunner]:
    """/health; /v1/completions: the prefill copy gets pull params, the decode a small
    answer; /metrics: ``?size=`` bytes of counters (set by ``pages`` per port)."""

    async def health(_: web.Request) -> web.Response:
        return web.json_response({})

    async def completions(request: web.Request) -> web.Response:
        raw = await request.read()
        doc: dict[str, object] = {"choices": [{"index": 0, "text": "ok"}]}
        if b'"do_remote_decode": true' in raw:
            doc["kv_transfer_params"] = PULL_PARAMS
        return web.json_response(doc)

    app = web.Application(client_max_size=1 << 30)
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", completions)
    return await serve_on_loopback(app)


def metrics_page(size: int) -> bytes:
    """A Prometheus text page of about ``size`` bytes (counters, vLLM-like names)."""
    lines, total, n = [], 0, 0
    while total < size:
        line = f'vllm:request_success_total{{engine="0",finished_reason="r{n}"}} {n}.0\n'
        lines.append(line)
        total += len(line)
        n += 1
    return ("# HELP vllm:request_success_total Requests\n# TYPE vllm:request_success_total "
            "counter\n" + "".join(lines)).encode()  # fmt: skip


async def metrics_engine(page: bytes) -> tuple[str, web.AppRunner]:
    async def health(_: web.Request) -> web.Response:
        return web.json_response({})

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    return await serve_on_loopback(app)


async def get(port: int, path: str) -> tuple[str, int]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n".encode())
    answer = await reader.read()
    writer.close()
    return answer.split(b"\r\n", 1)[0].decode(), len(answer)


def counter(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class Publisher:
    """A PUB socket bound here and the sequence number of its next batch."""

    def __init__(self) -> None:
        self.sock = zmq.Context.instance().socket(zmq.PUB)
        self.sock.setsockopt(zmq.SNDHWM, 100_000)  # vLLM's publisher's
        self.port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.seq = 0

    def send(self, payload: bytes) -> None:
        self.sock.send_multipart((b"", seq_frame(self.seq), payload))
        self.seq += 1


async def kv_stack(
    src: str, extra: tuple[str, ...] = ()
) -> tuple[Any, int, Publisher, list[web.AppRunner]]:
    """A PD proxy routing prefill by kv-events, fed by a PUB socket here, once the feed
    has delivered a first batch."""
    url, runner = await pd_engine()
    pub = Publisher()
    zport = pub.port
    port = free_port()
    flags = ["--prefill", url, "--decode", url, "--port", str(port), "--prefill-policy",
             "kv-events", "--kv-events", f"{url}=tcp://127.0.0.1:{zport}", "--memory-budget",
             str(8 << 30), "--max-body-bytes", str(64 << 20), "--body-timeout=60",
             "--prefill-timeout=120", "--decode-timeout=120", *extra]  # fmt: skip
    proc = await start_proxy_process(flags, src, port)
    for _ in range(100):  # the subscription reaches the PUB socket after the connection
        pub.send(batch())
        await asyncio.sleep(0.1)
        _, text = await metrics_text(port)
        if counter(text, "servekit_proxy_kv_events_batches_total") >= 1:
            break
    return proc, port, pub, [runner]


async def metrics_text(port: int) -> tuple[str, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n")
    answer = await reader.read()
    writer.close()
    head_, _, body = answer.partition(b"\r\n\r\n")
    return head_.split(b"\r\n", 1)[0].decode(), body.decode()


async def stop(proc: Any, pub: Publisher, runners: list[web.AppRunner]) -> None:
    proc.terminate()
    proc.wait(30)
    pub.sock.close(linger=0)
    for runner in runners:
        await runner.cleanup()


def feed_counts(text: str) -> dict[str, float]:
    names = ("batches", "bad", "oversized", "gaps")
    out = {n: counter(text, f"servekit_proxy_kv_events_{n}_total") for n in names}
    out["index_blocks"] = counter(text, "servekit_proxy_kv_index_blocks")
    return out


async def kv_hashes(src: str) -> dict[str, object]:
    proc, port, pub, runners = await kv_stack(src)
    try:
        await asyncio.sleep(1)
        base = rss_mb(proc.pid)
        for n in range(120):
            pub.send(batch(stored([n.to_bytes(4, "big") * 1_000_000], [n] * 16, 16)))
            await asyncio.sleep(0.05)
        await asyncio.sleep(2)
        _, text = await metrics_text(port)
        return {"rss_before_mb": round(base, 1), "rss_after_mb": round(rss_mb(proc.pid), 1),
                "proxy_peak_rss_mb": round(peak_rss_mb(proc.pid), 1),
                **feed_counts(text)}  # fmt: skip
    finally:
        await stop(proc, pub, runners)


async def kv_burst(src: str) -> dict[str, object]:
    proc, port, pub, runners = await kv_stack(src)
    try:
        await asyncio.sleep(1)
        base = rss_mb(proc.pid)
        frames = [batch(stored([n], [n] * 16, 16, [["x" * 3_800_000]])) for n in range(150)]
        t0 = time.monotonic()
        for frame in frames:
            pub.send(frame)
        peak = base
        while time.monotonic() - t0 < 15:
            await asyncio.sleep(0.05)
            peak = max(peak, rss_mb(proc.pid))
            _, text = await metrics_text(port)
            counts = feed_counts(text)
            if counts["batches"] + counts["bad"] >= 150 + 1 or time.monotonic() - t0 > 10:
                break
        await asyncio.sleep(1)
        _, text = await metrics_text(port)
        return {"frame_mb": round(len(frames[0]) / 1e6, 2), "rss_before_mb": round(base, 1),
                "rss_peak_sampled_mb": round(peak, 1),
                "proxy_peak_rss_mb": round(peak_rss_mb(proc.pid), 1),
                "rss_after_mb": round(rss_mb(proc.pid), 1), **feed_counts(text)}  # fmt: skip
    finally:
        await stop(proc, pub, runners)


async def kv_prompt(src: str, block_size: int) -> dict[str, object]:
    proc, port, pub, runners = await kv_stack(src)
    try:
        pub.send(batch(stored(list(range(1, 17)), list(range(16 * block_size)), block_size)))
        await asyncio.sleep(0.5)
        rng = random.Random(7)
        ids = [rng.randrange(100_000, 151_000) for _ in range(720_000)]
        body = json.dumps({"model": "m", "prompt": ids, "max_tokens": 2}).encode()
        warm = json.dumps({"model": "m", "prompt": ids[:200_000], "max_tokens": 2}).encode()
        for payload in (warm, body):  # the first spawns the parse worker: not timed
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(head("/v1/completions", payload)[:-2] + b"Connection: close\r\n\r\n")
            writer.write(payload)
            answer = asyncio.create_task(reader.read())
            probes: list[float] = []
            t0 = time.monotonic()

            async def probe(answer: asyncio.Task[bytes] = answer, probes: list[float] = probes,
                            ) -> None:  # fmt: skip
                while not answer.done():
                    probes.append(await timed_health(port))
                    await asyncio.sleep(0.02)

            await asyncio.gather(probe(), probe())
            took = time.monotonic() - t0
            status = (await answer).split(b"\r\n", 1)[0].decode()
        probes.sort()
        return {"block_size": block_size, "prompt_mb": round(len(body) / 1e6, 2),
                "prompt_tokens": len(ids), "answer": status, "request_s": round(took, 2),
                "health_max_s": round(probes[-1], 3),
                "health_median_s": round(probes[len(probes) // 2], 3)}  # fmt: skip
    finally:
        await stop(proc, pub, runners)


async def engine_metrics(src: str, extra: list[str]) -> dict[str, object]:
    small = [await metrics_engine(metrics_page(80_000)) for _ in range(4)]
    big = await metrics_engine(metrics_page(10_000_000))
    runners = [r for _, r in (*small, big)]
    out: dict[str, object] = {}
    try:
        for name, engines in (("4x80KB", small), ("1x10MB", [big])):
            port = free_port()
            urls = [u for u, _ in engines]
            flags = ["--replica", *urls, "--port", str(port), "--max-answer-bytes",
                     str(64 << 20), *extra]  # fmt: skip
            proc = await start_proxy_process(flags, src, port)
            try:
                await asyncio.sleep(0.5)
                base = rss_mb(proc.pid)
                count = 40 if name == "4x80KB" else 2
                gets = asyncio.gather(*(get(port, "/metrics/engines") for _ in range(count)))
                task = asyncio.ensure_future(gets)
                probes: list[float] = []
                t0 = time.monotonic()
                while not task.done():
                    probes.append(await timed_health(port))
                    await asyncio.sleep(0.02)
                answers = await task
                probes.sort()
                out[name] = {
                    "gets": count, "statuses": sorted({s for s, _ in answers}),
                    "answer_bytes": max(n for _, n in answers),
                    "took_s": round(time.monotonic() - t0, 2),
                    "health_max_s": round(probes[-1], 3), "rss_before_mb": round(base, 1),
                    "proxy_peak_rss_mb": round(peak_rss_mb(proc.pid), 1),
                    "growth_mb": round(peak_rss_mb(proc.pid) - base, 1),
                }  # fmt: skip
            finally:
                proc.terminate()
                proc.wait(30)
    finally:
        for runner in runners:
            await runner.cleanup()
    return out


async def probe(name: str, src: str, block_size: int, extra: list[str]) -> dict[str, object]:
    if name == "kv-hashes":
        return await kv_hashes(src)
    if name == "kv-burst":
        return await kv_burst(src)
    if name == "kv-prompt":
        return await kv_prompt(src, block_size)
    return await engine_metrics(src, extra)
