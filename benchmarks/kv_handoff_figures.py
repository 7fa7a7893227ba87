"""Figures of a real KV handoff on the CPU: TTFT, per-token latency and idle CPU.

Run against a started PD layout and a single reference (``servekit up local/1p1d
--detach --free-ports`` and the same for ``local/single``)::

    python benchmarks/kv_handoff_figures.py --pd URL --single URL --pids PID... [-n 5]

For each of ``-n`` prompts it streams one greedy completion (32 tokens) through
the PD entry and through the single engine, and prints the median time to the
first token and per later token of each, with their ratio (PD / single); then
the CPU each given engine pid (and its children) used while idle over 10 s,
from /proc/<pid>/stat. Nothing is asserted: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import urllib.request
from pathlib import Path

TOKENS = 32


def stream(url: str, prompt: str) -> tuple[float, float]:
    """(seconds to the first token, seconds per later token) of one streamed completion."""
    body = {"model": "tiny-llama", "prompt": prompt, "max_tokens": TOKENS, "temperature": 0,
            "stream": True, "ignore_eos": True}  # fmt: skip
    req = urllib.request.Request(
        f"{url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    t0 = time.perf_counter()
    first, stamps = None, []
    with urllib.request.urlopen(req, timeout=600) as resp:
        for line in resp:
            if line.startswith(b"data: {"):
                now = time.perf_counter()
                first = first or now
                stamps.append(now)
    assert first is not None, "no token"
    per = (stamps[-1] - first) / max(1, len(stamps) - 1)
    return first - t0, per


def _ticks(pid: int) -> int:
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total


def _tree(pid: int) -> list[int]:
    kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(p for k in kids for p in _tree(int(k)))]


def idle_cpu(pid: int, seconds: float = 10.0) -> float:
    """Cores the process tree of ``pid`` used over ``seconds`` (idle engine)."""
    pids = _tree(pid)
    before = sum(_ticks(p) for p in pids)
    time.sleep(seconds)
    after = sum(_ticks(p) for p in pids)
    return (after - before) / os.sysconf("SC_CLK_TCK") / seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pd", required=True)
    ap.add_argument("--single", required=True)
    ap.add_argument("--pids", type=int, nargs="*", default=[])
    ap.add_argument("-n", type=int, default=5)
    args = ap.parse_args()
    rows: dict[str, list[tuple[float, float]]] = {"pd": [], "single": []}
    for i in range(args.n):
        prompt = f"Figure prompt {i}: " + "the mill by the river turns slowly " * (4 + 8 * i)
        for name, url in (("pd", args.pd), ("single", args.single)):
            ttft, per = stream(url, prompt)
            rows[name].append((ttft, per))
            print(f"{name:7s} prompt {i}: TTFT {ttft:.3f} s, {per * 1000:.1f} ms/token", flush=True)
    med = {k: (statistics.median(t for t, _ in v), statistics.median(p for _, p in v))
           for k, v in rows.items()}  # fmt: skip
    for k, (ttft, per) in med.items():
        print(f"{k:7s} TTFT median {ttft:.3f} s, per token median {per * 1000:.1f} ms")
    print(f"ratio pd/single: TTFT {med['pd'][0] / med['single'][0]:.2f}x, "
          f"per token {med['pd'][1] / med['single'][1]:.2f}x")  # fmt: skip
    for pid in args.pids:
        print(f"idle CPU pid {pid} (+children) over 10 s: {idle_cpu(pid):.3f} cores")


if __name__ == "__main__":
    main()
