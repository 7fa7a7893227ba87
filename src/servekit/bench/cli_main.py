"""What ``servekit bench`` does once its flags are parsed.

Resolve the target, build the workloads, run them under a rich progress
display (a bar per point and an overall bar with the time left), write the
outputs, print the tables fitted to the terminal (and the baseline comparison).
Exit code 0 when every measured request succeeded, 1 when any failed (the
figures are still written: errors are counted, not hidden) or when the engine
never became idle.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console

from servekit.bench.config import RunSettings
from servekit.bench.foreign import read_baseline
from servekit.bench.options import BenchOptions, build_workloads, parse_slos
from servekit.bench.output import write_outputs
from servekit.bench.progress import planned_runs, rich_progress
from servekit.bench.runner import run_bench
from servekit.bench.screen import print_result
from servekit.deployment import load_deployment
from servekit.errors import UsageError, first_error_detail


def _settings(args: BenchOptions) -> RunSettings:
    try:
        return RunSettings(
            runs=args.runs,
            warmup=args.warmup,
            slo_ms=parse_slos(args.slo),
            idle_timeout_s=args.idle_timeout,
            api_key=args.api_key or os.environ.get("SERVEKIT_API_KEY"),
        )
    except ValidationError as exc:
        first = first_error_detail(exc)
        raise UsageError(f"--{first.loc[0]}: {first.msg}") from None


def default_out() -> Path:
    """``.servekit/bench/<UTC time>``."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(".servekit/bench") / stamp


def main(args: BenchOptions, console: Console | None = None) -> int:
    """Run the benchmark the flags describe; the process exit code."""
    console = console or Console()
    settings = _settings(args)
    workloads = build_workloads(
        args.workload,
        isl=args.isl,
        osl=args.osl,
        streams=args.streams,
        prefill_streams=args.prefill_streams,
        rates=args.rates,
        arrival=args.arrival,
        concurrency=args.concurrency,
        requests=args.requests,
        trace=args.trace,
        trace_speed=args.trace_speed,
    )
    baseline = read_baseline(args.baseline) if args.baseline else None
    deployment = load_deployment(args.target)
    try:
        total = planned_runs(workloads, settings.runs)
        with rich_progress(console, total=total) as progress:
            result = run_bench(
                deployment,
                workloads,
                settings,
                target=args.target,
                progress=progress,
                note=args.note,
            )
    except TimeoutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    out = args.out or default_out()
    paths = write_outputs(result, out, baseline)
    print_result(console, result, baseline)
    console.print(f"wrote {', '.join(str(p) for p in paths)}")
    errors = sum(p.errors for p in result.points)
    if errors:
        console.print(f"[red]{errors} measured request(s) failed; see bench.json error_kinds[/red]")
    return 1 if errors else 0
