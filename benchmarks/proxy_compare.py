"""servekit's proxy vs vllm-router and vllm-ascend's example proxy, on the same backends.

    .venv/bin/python benchmarks/proxy_compare.py [/tmp/ext/load_balance_proxy_server_example.py \
        --example-python /tmp/exvenv/bin/python] [--vllm-router $(which vllm-router)] \
        [--backend lean] [--concurrency 1 32] [--servekit-baseline TREE] [--servekit-workers 2]

vllm-router (PyPI ``vllm-router``, vLLM's Rust PD router; ``pip install
vllm-router``, found on PATH by default) runs with ``--vllm-pd-disaggregation
--policy round_robin``, and servekit's proxy with round-robin, on one prefill
and one decode. Each proxy's CPU time (user + system, from ``/proc/PID/stat``)
over a rate run, divided by the requests it completed, is its CPU per request
(summed over the processes below it: a ``--workers`` proxy's workers).

The example proxy is read from outside the repository (never vendored) and run
with its own interpreter (fastapi, uvicorn, httpx installed there). Both proxies
run as one process each, in front of the same zero-latency PD backends (one
prefill, one decode): servekit's simulator with the ``zero`` profile, or with
``--backend lean`` a minimal aiohttp backend started by this script.

Measured:
- TTFT (request sent -> first streamed byte) at concurrency 1, interleaved
  direct / servekit / example; "direct" is the client doing the PD exchange
  itself (prefill, then the decode stream), so the difference is what the proxy
  adds. p50 and p99 over ``--ttft-requests`` after a warm-up.
- Sustained rate: streamed requests completed per second with ``--concurrency``
  closed-loop streams for ``--duration`` seconds, ``--repeat`` times alternating
  direct / servekit / example (median kept); the best level that had no errors
  is the proxy's sustained rate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

PROMPT = "The quick brown fox jumps over the lazy dog. " * 8
KV = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- backends ---------------------------------------------------------------


def lean_backend_app(role: str, tokens: int) -> web.Application:
    """A zero-latency PD backend: prefill answers kv_transfer_params, decode streams."""
    frame = b'data: {"id":"c","object":"text_completion","choices":[{"index":0,"text":" tok"}]}\n\n'
    stream = frame * tokens + b"data: [DONE]\n\n"
    prefill_answer = json.dumps(
        {
            "id": "c",
            "choices": [{"index": 0, "text": " tok", "finish_reason": "length"}],
            "kv_transfer_params": {  # what NIXL / vllm-ascend Mooncake answer
                "do_remote_prefill": True,
                "do_remote_decode": False,
                "remote_engine_id": "p",
                "remote_request_id": "c",
                "remote_block_ids": [1],
                "remote_host": "127.0.0.1",
                "remote_port": 1,
            },
        }
    ).encode()

    async def generate(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if role == "prefill" or not body.get("stream"):
            return web.Response(body=prefill_answer, content_type="application/json")
        if not body.get("kv_transfer_params"):
            return web.json_response({"error": "guard"}, status=400)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(stream)
        await resp.write_eof()
        return resp

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    app = web.Application()
    app.router.add_post("/v1/completions", generate)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", health)
    return app


def serve_backend(kind: str, prefill_port: int, decode_port: int, tokens: int) -> None:
    """Run in a child process: both backends in one event loop, until killed."""
    if kind == "sim":
        from servekit.sim.server import run
        from servekit.sim.spec import spec_from_mapping

        eps = [
            {"name": "p0", "port": prefill_port, "role": "prefill", "profile": "zero"},
            {"name": "d0", "port": decode_port, "role": "decode", "profile": "zero",
             "guard": True},
        ]  # fmt: skip
        run(spec_from_mapping({"endpoints": eps}))
        return

    async def main() -> None:
        for role, port in (("prefill", prefill_port), ("decode", decode_port)):
            runner = web.AppRunner(lean_backend_app(role, tokens), access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
        await asyncio.Event().wait()

    asyncio.run(main())


# --- processes ----------------------------------------------------------------


@contextlib.contextmanager
def child(
    argv: list[str], log: Path, cwd: str | None = None, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


async def wait_ok(url: str, bound_s: float = 60.0) -> None:
    deadline = time.monotonic() + bound_s
    async with aiohttp.ClientSession() as c:
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with c.get(url) as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise SystemExit(f"{url} never answered 200; see the logs")


# --- measurements -------------------------------------------------------------


@dataclass
class Target:
    name: str
    send: Callable[[aiohttp.ClientSession, dict[str, Any]], Awaitable[tuple[float, bool]]]
    ttft_ms: list[float] = field(default_factory=list)
    rates: dict[int, tuple[float, int]] = field(default_factory=dict)
    pid: int | None = None
    cpu_ms: dict[int, float] = field(default_factory=dict)  # CPU per request, per level


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it (a --workers proxy's workers, parse workers)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
    return found


def cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of ``pid`` and the processes below it so far (0 without one)."""
    if pid is None:
        return 0.0
    ticks = 0
    for p in _tree(pid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += sum(int(f) for f in fields[11:13])  # utime stime
    return ticks / os.sysconf("SC_CLK_TCK")


def request_body(tokens: int) -> dict[str, Any]:
    return {"model": "sim-model", "prompt": PROMPT, "max_tokens": tokens, "stream": True}


async def stream_from(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], t0: float
) -> tuple[float, bool]:
    """POST a streamed request; returns (seconds to first byte, ended with [DONE])."""
    async with session.post(url, json=body) as resp:
        first = await resp.content.readany()
        ttft = time.perf_counter() - t0
        tail = first[-32:]
        async for chunk in resp.content.iter_any():
            tail = (tail + chunk)[-32:]
        return ttft, resp.status == 200 and b"[DONE]" in tail


def via_proxy(
    base: str,
) -> Callable[[aiohttp.ClientSession, dict[str, Any]], Awaitable[tuple[float, bool]]]:
    async def send(session: aiohttp.ClientSession, body: dict[str, Any]) -> tuple[float, bool]:
        return await stream_from(session, base + "/v1/completions", body, time.perf_counter())

    return send


def direct(
    prefill: str, decode: str
) -> Callable[[aiohttp.ClientSession, dict[str, Any]], Awaitable[tuple[float, bool]]]:
    """The client doing the PD exchange itself: the baseline without a proxy."""

    async def send(session: aiohttp.ClientSession, body: dict[str, Any]) -> tuple[float, bool]:
        t0 = time.perf_counter()
        pre = {**body, "stream": False, "max_tokens": 1, "min_tokens": 1, "kv_transfer_params": KV}
        async with session.post(prefill + "/v1/completions", json=pre) as resp:
            kv = (await resp.json())["kv_transfer_params"]
        return await stream_from(
            session, decode + "/v1/completions", {**body, "kv_transfer_params": kv}, t0
        )

    return send


async def measure_ttft(targets: list[Target], n: int, warmup: int, tokens: int) -> None:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        body = request_body(tokens)
        for i in range(warmup + n):
            for t in targets:
                ttft, ok = await t.send(session, body)
                if not ok:
                    raise SystemExit(f"{t.name}: a TTFT request failed")
                if i >= warmup:
                    t.ttft_ms.append(ttft * 1000)


async def measure_rate(
    t: Target, concurrency: int, duration: float, tokens: int
) -> tuple[float, int, float]:
    """Closed loop: ``concurrency`` streams back to back; (completed/s, errors, CPU ms/request)."""
    connector = aiohttp.TCPConnector(limit=0)
    done = errors = 0
    async with aiohttp.ClientSession(connector=connector) as session:
        body = request_body(tokens)
        stop_at = time.perf_counter() + duration

        async def worker() -> None:
            nonlocal done, errors
            while time.perf_counter() < stop_at:
                try:
                    _, ok = await t.send(session, body)
                except (aiohttp.ClientError, OSError, KeyError, ValueError):
                    ok = False
                done, errors = (done + 1, errors) if ok else (done, errors + 1)

        start = time.perf_counter()
        cpu0 = cpu_s(t.pid)
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
        cpu = cpu_s(t.pid) - cpu0
    return done / elapsed, errors, cpu * 1000 / done if done else 0.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def sustained(t: Target) -> float:
    clean = [rate for rate, errors in t.rates.values() if errors == 0]
    return max(clean, default=0.0)


def table(targets: list[Target]) -> str:
    """Side by side; "ratio" is servekit / vllm-router (rates; CPU: vllm-router / servekit)."""
    names = [t.name for t in targets]
    by = {t.name: t for t in targets}
    ours, ref = by["servekit"], by.get("vllm-router")
    best = [t for t in targets if t.name.startswith("servekit-w")]
    if best:  # the ratio is the multi-process proxy's: the one that uses the host's cores
        ours = best[-1]
    rows: list[tuple[str, ...]] = [("", *names, f"ratio ({ours.name})")]
    base = by["direct"]
    for q in (50, 99):
        vals = [pct(t.ttft_ms, q) for t in targets]
        rows.append((f"TTFT p{q} (ms)", *(f"{v:.3f}" for v in vals), ""))
        added = [v - pct(base.ttft_ms, q) for v in vals]
        rows.append((f"added TTFT p{q} (ms)", *(f"{a:.3f}" for a in added), ""))
    for c in ours.rates:
        cells = [f"{t.rates[c][0]:.0f} ({t.rates[c][1]} err)" for t in targets]
        ratio = f"{ours.rates[c][0] / ref.rates[c][0]:.2f}x" if ref and ref.rates[c][0] else ""
        rows.append((f"rate @{c} streams (req/s)", *cells, ratio))
        cpu = [f"{t.cpu_ms[c]:.3f}" if t.pid else "-" for t in targets]
        ratio = f"{ref.cpu_ms[c] / ours.cpu_ms[c]:.2f}x" if ref and ours.cpu_ms[c] else ""
        rows.append((f"CPU/request @{c} (ms)", *cpu, ratio))
    rates = [sustained(t) for t in targets]
    r = sustained(ref) if ref else 0.0
    rows.append(("sustained (req/s)", *(f"{v:.0f}" for v in rates),
                 f"{sustained(ours) / r:.2f}x" if r else ""))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows
    )


# --- main ---------------------------------------------------------------------


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "example", nargs="?", type=Path, help="path of load_balance_proxy_server_example.py"
    )
    p.add_argument("--vllm-router", default=shutil.which("vllm-router") or "",
                   help="vllm-router executable (PyPI vllm-router); empty: left out")  # fmt: skip
    p.add_argument("--example-python", default="/tmp/exvenv/bin/python",
                   help="interpreter with fastapi, uvicorn, httpx")  # fmt: skip
    p.add_argument("--backend", choices=("sim", "lean"), default="sim")
    p.add_argument("--tokens", type=int, default=16, help="streamed tokens per request")
    p.add_argument("--ttft-requests", type=int, default=300)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    p.add_argument("--duration", type=float, default=6.0, help="seconds per rate level")
    p.add_argument("--repeat", type=int, default=3, help="rate runs per level (median kept)")
    p.add_argument("--json", type=Path, help="write the figures here too")
    p.add_argument("--servekit-baseline", type=Path, metavar="TREE",
                   help="also run servekit's proxy from this source tree (a git worktree of "
                   "another commit), so a change is measured before/after in one run")  # fmt: skip
    p.add_argument("--servekit-workers", type=int, nargs="*", default=[], metavar="N",
                   help="also run servekit's proxy with --workers N (one column each), e.g. 2 "
                   "to use both cores of a 2-core host")  # fmt: skip
    p.add_argument("--serve-backend", nargs=2, type=int, metavar=("PREFILL", "DECODE"),
                   help=argparse.SUPPRESS)  # fmt: skip
    return p.parse_args()


async def run_all(
    args: argparse.Namespace, urls: dict[str, str], pids: dict[str, int]
) -> dict[str, Any]:
    targets = [Target("direct", direct(urls["prefill"], urls["decode"]))]
    targets += [Target(n, via_proxy(urls[n]), pid=pids[n]) for n in pids]
    await measure_ttft(targets, args.ttft_requests, args.warmup, args.tokens)
    for c in args.concurrency:
        runs: dict[str, list[tuple[float, int, float]]] = {t.name: [] for t in targets}
        for _ in range(args.repeat):  # alternate, so a burst of outside load hits all of them
            for t in targets:
                runs[t.name].append(await measure_rate(t, c, args.duration, args.tokens))
        for t in targets:
            rates = sorted(runs[t.name])
            t.rates[c] = (rates[len(rates) // 2][0], sum(e for _, e, _ in rates))
            t.cpu_ms[c] = statistics.median(cpu for _, _, cpu in rates)
    print(table(targets))
    return {
        t.name: {
            "ttft_ms_p50": pct(t.ttft_ms, 50),
            "ttft_ms_p99": pct(t.ttft_ms, 99),
            "ttft_ms_mean": statistics.fmean(t.ttft_ms),
            "rates": {
                str(c): {"req_per_s": r, "errors": e, "cpu_ms_per_request": t.cpu_ms[c]}
                for c, (r, e) in t.rates.items()
            },
            "sustained_req_per_s": sustained(t),
        }
        for t in targets
    }


def main() -> None:
    args = parse()
    if args.serve_backend:
        serve_backend(args.backend, *args.serve_backend, args.tokens)
        return
    if args.example is not None and not args.example.is_file():
        raise SystemExit("give the path of vllm-ascend's load_balance_proxy_server_example.py")
    logs = Path(tempfile.mkdtemp(prefix="proxy-compare-"))
    pp, dp, sp, ep, rp, bp = (free_port() for _ in range(6))
    urls = {k: f"http://127.0.0.1:{p}" for k, p in
            {"prefill": pp, "decode": dp, "servekit": sp, "example": ep,
             "vllm-router": rp}.items()}  # fmt: skip
    backend = [sys.executable, __file__, "--backend", args.backend, "--tokens", str(args.tokens),
               "--serve-backend", str(pp), str(dp)]  # fmt: skip

    def servekit(port: int) -> list[str]:
        return [sys.executable, "-m", "servekit.proxy", "--prefill", urls["prefill"],
                "--decode", urls["decode"], "--port", str(port), "--log-level", "warning",
                "--prefill-policy", "round-robin", "--decode-policy", "round-robin"]  # fmt: skip

    proxies: dict[str, tuple[list[str], str, str | None]] = {
        "servekit": (servekit(sp), "/health", None)
    }
    envs: dict[str, dict[str, str]] = {}
    if args.servekit_baseline is not None:  # the same proxy from another tree, same run
        urls["servekit-baseline"] = f"http://127.0.0.1:{bp}"
        proxies["servekit-baseline"] = (servekit(bp), "/health", None)
        src = str((args.servekit_baseline / "src").resolve())
        envs["servekit-baseline"] = {**os.environ, "PYTHONPATH": src}
    for n in args.servekit_workers:  # the same proxy in N processes on one port
        name = f"servekit-w{n}"
        urls[name] = f"http://127.0.0.1:{free_port()}"
        proxies[name] = ([*servekit(int(urls[name].rsplit(":", 1)[1])), "--workers", str(n)],
                         "/health", None)  # fmt: skip
    if args.vllm_router:
        proxies["vllm-router"] = (
            [args.vllm_router, "--vllm-pd-disaggregation", "--prefill", urls["prefill"],
             "--decode", urls["decode"], "--policy", "round_robin", "--host", "127.0.0.1",
             "--port", str(rp), "--prometheus-port", str(free_port())],
            "/health", None,
        )  # fmt: skip
    if args.example is not None:
        proxies["example"] = (
            [args.example_python, str(args.example.resolve()), "--host", "127.0.0.1",
             "--port", str(ep), "--prefiller-hosts", "127.0.0.1", "--prefiller-ports", str(pp),
             "--decoder-hosts", "127.0.0.1", "--decoder-ports", str(dp), "--log-level", "WARNING"],
            "/healthcheck", str(args.example.resolve().parent),
        )  # fmt: skip
    env_note = f"cpus={os.cpu_count()} load={os.getloadavg()[0]:.2f} backend={args.backend}"
    print(f"# {env_note}; logs in {logs}")
    with contextlib.ExitStack() as stack:
        stack.enter_context(child(backend, logs / "backend.log"))
        pids = {
            name: stack.enter_context(
                child(argv, logs / f"{name}.log", cwd=cwd, env=envs.get(name))
            ).pid
            for name, (argv, _, cwd) in proxies.items()
        }
        asyncio.run(wait_ok(urls["decode"] + "/health"))
        for name, (_, health, _) in proxies.items():
            asyncio.run(wait_ok(urls[name] + health))
        figures = asyncio.run(run_all(args, urls, pids))
    print(f"# load after: {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"env": env_note, "figures": figures}, indent=2) + "\n")


if __name__ == "__main__":
    main()
