"""How long an event loop stalls while metrics of many engines are parsed on it.

    .venv/bin/python benchmarks/metrics_loop_stall.py --engines 52

Two loops carry streams while they read engine metrics, and both do pure
Python work per read that grows with the engine count:

- the proxy's ``/metrics/engines`` merges every engine's page (parse, label,
  render: :func:`servekit.proxy.engine_metrics.merge`), while it relays client streams;
- the benchmark's sampler splits that page and parses one snapshot per engine
  (:func:`servekit.bench.sampler.relay_snapshots`) every 0.25 s, while the load
  generator stamps the arrival of the very frames it measures.

This script takes one real simulator engine's /metrics page (``servekit sim
--layout local/1p1d`` after a few requests), copies it for ``--engines`` engine
URLs, and runs each job in the two ways the code could call it, alternately,
``--rounds`` times each: ``inline`` on the event loop (how both worked before)
and ``thread`` through ``asyncio.to_thread`` (how both work now). A ticker task
on the same loop sleeps 1 ms at a time and records how late each wake-up is:
its worst lateness is the longest a stream could have stalled. Printed side by
side, with the ratio; no wall-clock assertion.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from servekit.bench.sampler import relay_snapshots
from servekit.proxy.engine_metrics import merge
from servekit.proxy.instances import Instance


def sim_page() -> str:
    """One simulated engine's /metrics after a few requests (its histograms filled)."""
    with tempfile.TemporaryDirectory() as tmp:
        ready = Path(tmp) / "ready.json"
        sim = subprocess.Popen(
            [sys.executable, "-m", "servekit", "sim", "--layout", "local/1p1d",
             "--ready-file", str(ready)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not ready.exists():
                if sim.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the simulator did not start")
                time.sleep(0.05)
            mixed = [e for e in json.loads(ready.read_text())["endpoints"] if e["role"] != "decode"]
            url = mixed[0]["url"]
            with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as resp:
                model = json.loads(resp.read())["data"][0]["id"]
            body = json.dumps({"model": model, "prompt": "hello " * 40, "max_tokens": 8})
            for _ in range(5):
                req = urllib.request.Request(
                    f"{url}/v1/completions", body.encode(), {"Content-Type": "application/json"}
                )
                urllib.request.urlopen(req, timeout=30).read()
            with urllib.request.urlopen(f"{url}/metrics", timeout=30) as resp:
                page: str = resp.read().decode()
                return page
        finally:
            sim.terminate()
            sim.wait(30)


async def _ticker(stop: asyncio.Event, lateness: list[float]) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(0.001)
        lateness.append((time.perf_counter() - start - 0.001) * 1000)


async def _measure(mode: str, job: Callable[[], object]) -> dict[str, float]:
    stop, lateness = asyncio.Event(), []
    ticker = asyncio.create_task(_ticker(stop, lateness))
    await asyncio.sleep(0.05)
    start = time.perf_counter()
    if mode == "inline":
        job()
    else:
        await asyncio.to_thread(job)
    took = time.perf_counter() - start
    await asyncio.sleep(0.02)
    stop.set()
    await ticker
    return {"work_s": took, "worst_ms": max(lateness)}


async def main_async(engines: int, rounds: int) -> None:
    page = sim_page()
    instances = [
        Instance(name=f"e{i}", role="decode" if i % 2 else "prefill", url=f"http://10.0.0.{i}:9000")
        for i in range(engines)
    ]
    texts: list[str | None] = [page] * engines
    merged = merge(instances, texts).decode()
    urls = [i.url for i in instances]
    assert all(not isinstance(s, Exception) for s in relay_snapshots("/m", merged, urls, 0))
    jobs: dict[str, Callable[[], object]] = {
        "proxy: merge /metrics/engines": lambda: merge(instances, texts),
        "bench: one sample via the relay": lambda: relay_snapshots("/m", merged, urls, 0),
    }
    print(f"{engines} engines, one page {len(page):,} bytes, relay page {len(merged):,} bytes,"
          f" {rounds} rounds each (median)")  # fmt: skip
    print(f"{'job':34} {'called':7} {'work s':>8} {'worst loop stall ms':>20}")
    for name, job in jobs.items():
        results: dict[str, list[dict[str, float]]] = {"inline": [], "thread": []}
        for _ in range(rounds):
            for mode, runs in results.items():
                runs.append(await _measure(mode, job))
        med = {m: {k: statistics.median(r[k] for r in rs) for k in ("work_s", "worst_ms")}
               for m, rs in results.items()}  # fmt: skip
        for mode, figures in med.items():
            print(f"{name:34} {mode:7} {figures['work_s']:8.3f} {figures['worst_ms']:20.1f}")
        ratio = med["inline"]["worst_ms"] / max(med["thread"]["worst_ms"], 1e-9)
        print(f"{name:34} worst stall inline / thread: {ratio:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", type=int, default=52)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main_async(args.engines, args.rounds))


if __name__ == "__main__":
    main()
