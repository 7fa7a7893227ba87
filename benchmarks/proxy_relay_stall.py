"""How long the proxy's event loop stalls while it builds ``/metrics/engines``.

    .venv/bin/python benchmarks/proxy_relay_stall.py --engines 52

The relay merges every engine's /metrics page (parse, label, render: pure
Python). While it does, every stream the proxy relays waits. This script takes
one real simulator engine's /metrics page (``servekit sim --layout local/1p1d``
after a few requests), copies it for ``--engines`` engine URLs, and merges the
copies with servekit's own :func:`servekit.proxy.relay.merge` in the two ways
the proxy could call it, alternately, ``--rounds`` times each:

- ``inline``: on the event loop (how the relay worked before);
- ``thread``: ``asyncio.to_thread`` (how it works now).

Meanwhile a ticker task on the same loop sleeps 1 ms at a time and records how
late each wake-up is: its worst lateness is the longest a relayed stream could
have stalled. Printed side by side, with the ratio; no wall-clock assertion.
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
from pathlib import Path

from servekit.proxy.instances import Instance
from servekit.proxy.relay import merge


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


async def _measure(
    mode: str, instances: list[Instance], texts: list[str | None]
) -> dict[str, float]:
    stop, lateness = asyncio.Event(), []
    ticker = asyncio.create_task(_ticker(stop, lateness))
    await asyncio.sleep(0.05)
    start = time.perf_counter()
    if mode == "inline":
        size = len(merge(instances, texts))
    else:
        size = len(await asyncio.to_thread(merge, instances, texts))
    took = time.perf_counter() - start
    await asyncio.sleep(0.02)
    stop.set()
    await ticker
    return {"merge_s": took, "worst_ms": max(lateness), "bytes": size}


async def main_async(engines: int, rounds: int) -> None:
    page = sim_page()
    instances = [
        Instance(name=f"e{i}", role="decode" if i % 2 else "prefill", url=f"http://10.0.0.{i}:9000")
        for i in range(engines)
    ]
    texts: list[str | None] = [page] * engines
    results: dict[str, list[dict[str, float]]] = {"inline": [], "thread": []}
    for _ in range(rounds):
        for mode, runs in results.items():
            runs.append(await _measure(mode, instances, texts))
    print(f"{engines} engines, one page {len(page):,} bytes, merged page "
          f"{int(results['thread'][0]['bytes']):,} bytes, {rounds} rounds each (median)")  # fmt: skip
    print(f"{'':8} {'merge s':>9} {'worst loop stall ms':>20}")
    med = {m: {k: statistics.median(r[k] for r in rs) for k in ("merge_s", "worst_ms")}
           for m, rs in results.items()}  # fmt: skip
    for mode, figures in med.items():
        print(f"{mode:8} {figures['merge_s']:9.3f} {figures['worst_ms']:20.1f}")
    ratio = med["inline"]["worst_ms"] / max(med["thread"]["worst_ms"], 1e-9)
    print(f"worst stall inline / thread: {ratio:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", type=int, default=52)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main_async(args.engines, args.rounds))


if __name__ == "__main__":
    main()
