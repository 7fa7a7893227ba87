"""Benchmark (a): does the harness measure what the simulator was told to do?

A simulator endpoint with a known latency profile, in its own process (TTFT = prefill overhead,
flat per-token decode step, no speculation, one request at a time) is measured
with the harness's concurrency sweep at C=1 and single-stream decode. The
medians must land within 2% of the configured values.

    .venv/bin/python benchmarks/bench_accuracy.py [--ttft-ms 100] [--itl-ms 20] [--runs 3]

Writes the full result to .servekit/bench/accuracy/ (bench.json, bench.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench_common import sim_process

from servekit.bench import ConcurrencySweep, RunSettings, SingleStream, run_bench, write_outputs
from servekit.deployment import Deployment
from servekit.sim.profile import Profile

TOLERANCE = 0.02


def profile(ttft_s: float, itl_s: float) -> Profile:
    return Profile(
        name="accuracy",
        label="simulated (accuracy benchmark)",
        prefill_overhead_s=ttft_s,
        prefill_per_token_s=0.0,
        decode_step_s=((1, itl_s), (64, itl_s)),
        max_num_seqs=64,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ttft-ms", type=float, default=100.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path(".servekit/bench/accuracy"))
    args = ap.parse_args()
    prof = profile(args.ttft_ms / 1000, args.itl_ms / 1000)
    spec = {"endpoints": [{"name": "acc", "port": 0, "profile": prof.model_dump(mode="json")}]}
    workloads = [
        ConcurrencySweep(
            concurrencies=(1,), requests=args.requests, input_tokens=128, output_tokens=64
        ),
        SingleStream(prompt_tokens=128, output_tokens=64),
    ]
    with sim_process(spec) as url:
        result = run_bench(
            Deployment(entry_url=url, engine="sim"),
            workloads,
            RunSettings(runs=args.runs),
            note=f"accuracy vs sim: TTFT {args.ttft_ms} ms, ITL {args.itl_ms} ms",
        )
    write_outputs(result, args.out)
    sweep = result.points[0].figures
    single = result.points[1].figures
    # (name, configured, measured, gated): the gate is the TTFT and ITL
    # medians; the rest is printed for context (single-stream TTFT is one
    # request per run, so one scheduling hiccup on a loaded host moves it).
    rows = [
        ("TTFT p50 (C=1)", args.ttft_ms, sweep["ttft_p50_ms"].median, True),
        ("ITL p50 (C=1)", args.itl_ms, sweep["itl_p50_ms"].median, True),
        ("TPOT p50 (C=1)", args.itl_ms, sweep["tpot_p50_ms"].median, False),
        ("single-stream ms/step", args.itl_ms, single["ms_per_step"].median, True),
        ("single-stream TTFT", args.ttft_ms, single["ttft_ms"].median, False),
    ]
    print(f"{'figure':<24}{'configured':>12}{'measured':>12}{'ratio':>9}  within 2%")
    worst = 0.0
    for name, want, got, gated in rows:
        ratio = (got or 0.0) / want
        if gated:
            worst = max(worst, abs(ratio - 1))
        ok = ("yes" if abs(ratio - 1) <= TOLERANCE else "NO") + ("" if gated else " (info)")
        print(f"{name:<24}{want:>12.3f}{got or float('nan'):>12.3f}{ratio:>9.4f}  {ok}")
    errors = sum(p.errors for p in result.points)
    print(f"errors: {errors}; worst gated deviation {worst * 100:.2f}%")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    raise SystemExit(main())
