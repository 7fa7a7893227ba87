"""Issue 36's proxy attacks, measured against one proxy process (before/after figures).

Starts a minimal engine in this process (``/health``; ``/v1/completions``
answers a 16 MB JSON body, or streams for ever when asked to) and one proxy
process from ``--proxy-src`` (so the same script measures an older tree), runs
one attack, prints what it saw as JSON, and stops both. Loopback only; every
attack is bounded in sockets and seconds.

    .venv/bin/python benchmarks/proxy_hardening.py deaf [--proxy-src /tmp/old/src]
    .venv/bin/python benchmarks/proxy_hardening.py deaf-stream
    .venv/bin/python benchmarks/proxy_hardening.py metaserver
    .venv/bin/python benchmarks/proxy_hardening.py small-values
    .venv/bin/python benchmarks/proxy_hardening.py nested
    .venv/bin/python benchmarks/proxy_hardening.py parse [--sizes 32 63]
    .venv/bin/python benchmarks/proxy_hardening.py answers [--sizes 24 48] [--before-src DIR]
        [--shape strings]

``parse`` runs its own proxies: for each body size, a PD proxy parsing on the
event loop (``--parse-inline-bytes`` huge) and one parsing in its worker (the
default), side by side: /health latency while the chat request of small
values is parsed and served, and peak RSS of the proxy and of its worker.

``answers`` does the same for an engine's answer: a small completion request
whose prefill answers ``prompt_logprobs`` of the given size (small objects, as
vLLM writes them) beside its ``kv_transfer_params``. Side by side: the tree of
``--before-src`` if given (its defaults), then this tree parsing the answer on
the loop, in a worker kept as it grew (``--parse-worker-rss 0``), and in a
worker replaced once idle (the default): the slowest and median /health, the
proxy's peak RSS, the workers' peak and their RSS a second after the answer.
``--shape strings`` makes each logprob's token 700 characters: strings malloc'd
one by one, whose heap the worker keeps after the parse (what replacing it is for).

Issue 45's probes (:mod:`proxy_hardening_feeds`: the KV-event feed, the
engine-metrics relay), each against the tree of ``--proxy-src``:

    .venv/bin/python benchmarks/proxy_hardening.py kv-hashes
    .venv/bin/python benchmarks/proxy_hardening.py kv-burst
    .venv/bin/python benchmarks/proxy_hardening.py kv-prompt [--block-size 1]
    .venv/bin/python benchmarks/proxy_hardening.py engine-metrics [--proxy-flag=--FLAG=VALUE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiohttp import web
from proxy_hardening_common import (
    PULL_PARAMS,
    free_port,
    head,
    health,
    peak_rss_mb,
    rss_mb,
    serve_on_loopback,
    start_proxy_process,
    timed_health,
)

BIG = json.dumps({"choices": [{"text": "x" * (16 << 20)}]}).encode()
TIMEOUTS = ["--header-timeout=5", "--body-timeout=1", "--stream-idle-timeout=2",
            "--decode-timeout=5", "--prefill-timeout=5"]  # fmt: skip


async def engine() -> tuple[str, web.AppRunner]:
    async def health(_: web.Request) -> web.Response:
        return web.json_response({})

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.Response(body=BIG, content_type="application/json")
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        chunk = b"data: " + json.dumps({"choices": [{"text": "y" * 1000}]}).encode() + b"\n\n"
        while True:
            await out.write(chunk)
            await asyncio.sleep(0)

    async def chat(request: web.Request) -> web.Response:
        """Read, never parse (the probes share this loop): a prefill copy gets params."""
        raw = await request.read()
        doc: dict[str, object] = {"choices": [{"message": {"content": "ok"}}]}
        if b'"do_remote_decode": true' in raw:
            doc["kv_transfer_params"] = PULL_PARAMS
        return web.json_response(doc)

    app = web.Application(client_max_size=1 << 30)
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    return await serve_on_loopback(app)


async def deaf(port: int, body: bytes, n: int = 4) -> list[asyncio.StreamWriter]:
    writers = []
    for _ in range(n):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        _, writer = await asyncio.open_connection(sock=sock)
        writer.write(head("/v1/completions", body) + body)
        writers.append(writer)
    return writers


async def deaf_attack(kind: str, port: int, pid: int) -> dict[str, object]:
    """Four clients that never read their answer (unstreamed 16 MB, or an endless stream)."""
    base = rss_mb(pid)
    payload = {"prompt": "x", "max_tokens": 9, "stream": kind == "deaf-stream"}
    writers = await deaf(port, json.dumps(payload).encode())
    peak, statuses, t0 = base, [], time.monotonic()
    while time.monotonic() - t0 < 15:
        await asyncio.sleep(1)
        peak = max(peak, rss_mb(pid))
        statuses.append(await health(port))
    held = established(port)
    del writers
    return {"rss_before_mb": round(base, 1), "rss_peak_mb": round(peak, 1),
            "clients_still_connected_after_15s": held, "health": sorted(set(statuses))}  # fmt: skip


async def metaserver_attack(port: int) -> dict[str, object]:
    """20 callers trickling a metaserver body, a byte every 0.5 s each, for 6 s."""
    body = json.dumps({"request_id": "cmpl-x-0", "remote_block_ids": [1] * 50}).encode()
    pairs = [await asyncio.open_connection("127.0.0.1", port) for _ in range(20)]
    for _, w in pairs:
        w.write(head("/v1/metaserver", body))
    statuses = []
    t0 = time.monotonic()
    for i in range(12):
        for r, w in pairs:
            if not r.at_eof():
                w.write(body[i : i + 1])
        statuses.append(await health(port))
        await asyncio.sleep(0.5)
    return {"held_after_s": round(time.monotonic() - t0, 1), "still_held": established(port),
            "health": sorted(set(statuses))}  # fmt: skip


async def small_values_attack(port: int, pid: int) -> dict[str, object]:
    """One 32 MiB chat request of a million small message objects."""
    base = rss_mb(pid)
    many = [{"role": "user", "content": "x"}] * 1_000_000
    body = json.dumps({"model": "m", "messages": many, "max_tokens": 2}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head("/v1/chat/completions", body) + body)
    peak, slowest, t0 = base, 0.0, time.monotonic()
    answer = asyncio.create_task(reader.read())
    while not answer.done() and time.monotonic() - t0 < 20:
        h0 = time.monotonic()
        await health(port)
        slowest = max(slowest, time.monotonic() - h0)
        peak = max(peak, rss_mb(pid))
    first = (await asyncio.wait_for(answer, 30)).split(b"\r\n", 1)[0].decode()
    return {"body_mib": round(len(body) / 2**20, 1), "answer": first, "rss_before_mb": base,
            "rss_peak_mb": round(peak, 1), "slowest_health_s": round(slowest, 2)}  # fmt: skip


async def nested_attack(port: int) -> dict[str, object]:
    """Five chat requests whose content nests 900 lists deep."""
    content: object = "x"
    for _ in range(900):
        content = [content]
    body = json.dumps({"messages": [{"role": "user", "content": content}]}).encode()
    statuses = []
    for _ in range(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        request = head("/v1/chat/completions", body)[:-2] + b"Connection: close\r\n\r\n"
        writer.write(request + body)
        statuses.append((await reader.read()).split(b"\r\n", 1)[0].decode())
    return {"answers": sorted(set(statuses))}


async def attack(kind: str, port: int, pid: int) -> dict[str, object]:
    if kind in ("deaf", "deaf-stream"):
        return await deaf_attack(kind, port, pid)
    if kind == "metaserver":
        return await metaserver_attack(port)
    if kind == "small-values":
        return await small_values_attack(port, pid)
    return await nested_attack(port)


def children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return out


def small_values(mib: int) -> bytes:
    """A chat body of about ``mib`` MiB of small message objects."""
    one = {"role": "user", "content": "x"}
    many = [one] * ((mib << 20) // (len(json.dumps(one)) + 2))
    return json.dumps({"model": "m", "messages": many, "max_tokens": 2}).encode()


async def parse_run(url: str, body: bytes, inline: bool, src: str) -> dict[str, object]:
    """One PD proxy, one big request; /health probed by two clients, every 20 ms each."""
    port = free_port()
    flags = ["--prefill", url, "--decode", url, "--port", str(port), "--max-body-bytes",
             str(128 << 20), "--max-parse-bytes", str(4 << 30), "--memory-budget", str(8 << 30),
             "--body-timeout=60", "--prefill-timeout=120", "--decode-timeout=120"]  # fmt: skip
    if inline:
        flags.append(f"--parse-inline-bytes={1 << 40}")
    proc = await start_proxy_process(flags, src, port)
    try:
        warm = small_values(2)  # the worker is spawned with the first big body: not timed
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head("/v1/chat/completions", warm)[:-2] + b"Connection: close\r\n\r\n")
        writer.write(warm)
        assert (await reader.read()).startswith(b"HTTP/1.1 200")
        base = rss_mb(proc.pid)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        t0 = time.monotonic()
        writer.write(head("/v1/chat/completions", body)[:-2] + b"Connection: close\r\n\r\n")
        writer.write(body)
        answer = asyncio.create_task(reader.read())
        probes: list[float] = []

        async def probe() -> None:  # paced, so the probes do not take the CPU they measure
            while not answer.done():
                probes.append(await timed_health(port))
                await asyncio.sleep(0.02)

        await asyncio.gather(probe(), probe())
        took = time.monotonic() - t0
        status = (await answer).split(b"\r\n", 1)[0].decode()
        workers = [c for c in children(proc.pid) if b"spawn_main" in
                   Path(f"/proc/{c}/cmdline").read_bytes()]  # fmt: skip
        probes.sort()
        return {
            "parse": "inline" if inline else "worker", "answer": status,
            "request_s": round(took, 2), "health_max_s": round(probes[-1], 3),
            "health_median_s": round(probes[len(probes) // 2], 3), "probes": len(probes),
            "proxy_rss_before_mb": round(base, 1), "proxy_peak_rss_mb": round(peak_rss_mb(proc.pid), 1),
            "worker_peak_rss_mb": round(sum(peak_rss_mb(w) for w in workers), 1),
        }  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(30)


async def parse_compare(args: argparse.Namespace) -> dict[str, object]:
    url, runner = await engine()
    rows = []
    try:
        for mib in args.sizes:
            body = small_values(mib)
            for inline in (True, False):
                row = await parse_run(url, body, inline, args.proxy_src)
                rows.append({"body_mib": round(len(body) / 2**20, 1), **row})
    finally:
        await runner.cleanup()
    return {"runs": rows}


def logprobs_answer(mib: int, token: str = "Hello") -> bytes:
    """A prefill's answer with about ``mib`` MiB of ``prompt_logprobs``, each of them
    ``token`` (a long one: strings malloc'd one by one, a heap CPython keeps grown)."""
    one = {"9906": {"logprob": -1.25, "rank": 1, "decoded_token": token}}
    many = [None, *[one] * ((mib << 20) // (len(json.dumps(one)) + 2))]
    doc = {"id": "cmpl-1", "object": "text_completion", "kv_transfer_params": PULL_PARAMS,
           "choices": [{"index": 0, "text": "a", "prompt_logprobs": many}]}  # fmt: skip
    return json.dumps(doc).encode()


async def logprobs_engine(answers: dict[bytes, bytes]) -> tuple[str, web.AppRunner]:
    """/v1/completions: a prefill copy (it asks for a remote decode) gets the answer its
    prompt names in ``answers`` (bytes made beforehand: the probes share this loop), the
    decode a small one."""

    async def health(_: web.Request) -> web.Response:
        return web.json_response({})

    async def completions(request: web.Request) -> web.Response:
        raw = await request.read()
        if b'"do_remote_decode": true' not in raw:
            return web.json_response({"choices": [{"index": 0, "text": "ok"}]})
        prompt = raw.split(b'"prompt": "', 1)[1].split(b'"', 1)[0]
        return web.Response(body=answers[prompt], content_type="application/json")

    app = web.Application(client_max_size=1 << 30)
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", completions)
    return await serve_on_loopback(app)


def workers_of(pid: int) -> list[int]:
    return [c for c in children(pid) if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


async def post_completion(port: int, prompt: str) -> str:
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": 2}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head("/v1/completions", body)[:-2] + b"Connection: close\r\n\r\n" + body)
    answer = await reader.read()
    writer.close()
    return answer.split(b"\r\n", 1)[0].decode()


async def answers_run(url: str, kind: str, src: str) -> dict[str, object]:
    """One PD proxy (``kind``: before, loop, kept, replaced); the big answer once, with
    /health probed by two clients every 20 ms and the workers' RSS sampled meanwhile."""
    port = free_port()
    flags = ["--prefill", url, "--decode", url, "--port", str(port), "--memory-budget",
             str(8 << 30), "--prefill-timeout=120", "--decode-timeout=120"]  # fmt: skip
    flags += {"loop": [f"--parse-inline-bytes={1 << 40}"], "kept": ["--parse-worker-rss=0"]}.get(
        kind, []
    )
    proc = await start_proxy_process(flags, src, port)
    try:
        assert (await post_completion(port, "warm")).endswith("200 OK")  # spawns the worker
        await asyncio.sleep(1)
        fresh = sum(rss_mb(w) for w in workers_of(proc.pid))
        answer = asyncio.create_task(post_completion(port, "big"))
        t0 = time.monotonic()
        probes: list[float] = []
        worker_peak = fresh

        async def probe() -> None:  # paced, so the probes do not take the CPU they measure
            while not answer.done():
                probes.append(await timed_health(port))
                await asyncio.sleep(0.02)

        async def sample() -> None:
            nonlocal worker_peak
            while not answer.done():
                worker_peak = max(worker_peak, sum(rss_mb(w) for w in workers_of(proc.pid)))
                await asyncio.sleep(0.05)

        await asyncio.gather(probe(), probe(), sample())
        took = time.monotonic() - t0
        await asyncio.sleep(1)  # an idle worker past --parse-worker-rss is replaced by now
        probes.sort()
        return {
            "run": kind, "answer": await answer, "request_s": round(took, 2),
            "health_max_s": round(probes[-1], 3),
            "health_median_s": round(probes[len(probes) // 2], 3),
            "proxy_peak_rss_mb": round(peak_rss_mb(proc.pid), 1),
            "worker_rss_fresh_mb": round(fresh, 1), "worker_peak_rss_mb": round(worker_peak, 1),
            "worker_rss_after_mb": round(sum(rss_mb(w) for w in workers_of(proc.pid)), 1),
        }  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(30)


async def answers_compare(args: argparse.Namespace) -> dict[str, object]:
    rows = []
    for mib in args.sizes:
        token = "Hello" if args.shape == "logprobs" else " " * 700
        answers = {b"warm": logprobs_answer(2), b"big": logprobs_answer(mib, token)}
        url, runner = await logprobs_engine(answers)
        runs = [("before", args.before_src)] if args.before_src else []
        runs += [(kind, args.proxy_src) for kind in ("loop", "kept", "replaced")]
        try:
            for kind, src in runs:
                row = await answers_run(url, kind, src)
                rows.append({"answer_mib": round(len(answers[b"big"]) / 2**20, 1), **row})
        finally:
            await runner.cleanup()
    return {"runs": rows}


def established(port: int) -> int:
    """Connections the proxy holds open on its port (its side, state ESTABLISHED)."""
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    mine = f"{port:04X}"
    return sum(1 for r in rows if r.split()[1].endswith(":" + mine) and r.split()[3] == "01")


FEEDS = ("kv-hashes", "kv-burst", "kv-prompt", "engine-metrics")


async def main(args: argparse.Namespace) -> dict[str, object]:
    if args.attack in FEEDS:
        from proxy_hardening_feeds import probe

        return await probe(args.attack, args.proxy_src, args.block_size, args.proxy_flag)
    if args.attack == "parse":
        return await parse_compare(args)
    if args.attack == "answers":
        return await answers_compare(args)
    url, runner = await engine()
    port = free_port()
    mode = ["--prefill", url, "--decode", url, "--mode", "layerwise",
            "--metaserver-url", f"http://127.0.0.1:{port}/v1/metaserver",
            "--max-connections", "20"] if args.attack == "metaserver" else ["--replica", url]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": args.proxy_src}
    extra = ["--send-timeout=2"] if args.send_timeout else []
    if args.attack == "small-values":
        extra.append("--body-timeout=60")  # 32 MiB must arrive; the parse is what is measured
    log = tempfile.NamedTemporaryFile(suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "servekit.proxy", "--port", str(port), *mode, *TIMEOUTS, *extra],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        for _ in range(100):
            if (await health(port)).endswith("200 OK"):
                break
            await asyncio.sleep(0.1)
        seen = await attack(args.attack, port, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:  # an old proxy waits on its stuck handlers
            proc.kill()
            proc.wait(10)
        await runner.cleanup()
    seen["proxy_log_bytes"] = Path(log.name).stat().st_size
    seen["traceback_lines"] = Path(log.name).read_text(errors="replace").count("Traceback")
    return seen


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("attack", choices=["deaf", "deaf-stream", "metaserver", "small-values",
                                           "nested", "parse", "answers", *FEEDS])  # fmt: skip
    parser.add_argument("--block-size", type=int, default=1,
                        help="kv-prompt: the block size the events announce")  # fmt: skip
    parser.add_argument("--proxy-flag", action="append", default=[],
                        help="engine-metrics: one more flag for its proxies")  # fmt: skip
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        help="MiB: parse, the bodies (32 63); answers, the answers (24 48)",
    )
    parser.add_argument("--before-src", help="answers: a first run from this source tree")
    parser.add_argument("--shape", choices=["logprobs", "strings"], default="logprobs",
                        help="answers: prompt_logprobs of short tokens, or of 700-character "
                        "ones (a heap CPython keeps)")  # fmt: skip
    parser.add_argument("--proxy-src", default=str(Path(__file__).resolve().parents[1] / "src"))
    parser.add_argument("--send-timeout", action="store_true", help="pass --send-timeout=2")
    options = parser.parse_args()
    options.sizes = options.sizes or ([24, 48] if options.attack == "answers" else [32, 63])
    print(json.dumps(asyncio.run(main(options)), indent=1))
