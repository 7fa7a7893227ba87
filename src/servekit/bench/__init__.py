"""Benchmarks: workloads, load generation, statistics, baselines, reports, plots.

The Python API (``servekit bench`` and ``servekit verify`` use it)::

    from servekit.bench import BenchOptions, RunSettings, run_bench, run_workloads, write_outputs
    result = run_bench(BenchOptions(target="http://host:8000", workload=("single",), runs=3))
    write_outputs(result, Path("out"), baseline=BenchResult.read(Path("old/bench.json")))
    markdown = render_section(result)   # for the release report
    run_workloads(deployment, [TraceReplay(path="trace.jsonl")])  # specs of your own
    rows = read_rows(Path("out/requests.jsonl"))                # the per-request records
    before = read_baseline(Path("profile_export_aiperf.json"))  # or bench.json, vllm's JSON

Method and metric definitions: docs/bench.md.
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.bench.baseline import Delta, compare
    from servekit.bench.config import (
        DEFAULT_WORKLOADS,
        WORKLOAD_NAMES,
        ConcurrencySweep,
        KVCapacity,
        MultiStream,
        Prefill,
        RateSweep,
        RunSettings,
        SingleStream,
        TraceReplay,
        Workload,
        WorkloadSpec,
        default_workloads,
    )
    from servekit.bench.foreign import read_baseline
    from servekit.bench.options import BenchOptions
    from servekit.bench.output import write_outputs
    from servekit.bench.plots import write_plots
    from servekit.bench.progress import planned_runs
    from servekit.bench.records import RequestRow, read_rows
    from servekit.bench.report import TITLES, render_markdown, render_section
    from servekit.bench.runner import bench_async, main, run_bench, run_workloads
    from servekit.bench.schema import SCHEMA_VERSION, BenchInputs, BenchResult, Figure, Point

__getattr__, __dir__ = lazy_face(__name__)
__all__ = [
    "DEFAULT_WORKLOADS",
    "SCHEMA_VERSION",
    "TITLES",
    "WORKLOAD_NAMES",
    "BenchInputs",
    "BenchOptions",
    "BenchResult",
    "ConcurrencySweep",
    "Delta",
    "Figure",
    "KVCapacity",
    "MultiStream",
    "Point",
    "Prefill",
    "RateSweep",
    "RequestRow",
    "RunSettings",
    "SingleStream",
    "TraceReplay",
    "Workload",
    "WorkloadSpec",
    "bench_async",
    "compare",
    "default_workloads",
    "main",
    "planned_runs",
    "read_baseline",
    "read_rows",
    "render_markdown",
    "render_section",
    "run_bench",
    "run_workloads",
    "write_outputs",
    "write_plots",
]
