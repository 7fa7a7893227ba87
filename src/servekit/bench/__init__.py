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
    from servekit.bench.baseline import Delta as Delta, compare as compare
    from servekit.bench.config import (
        DEFAULT_WORKLOADS as DEFAULT_WORKLOADS,
        WORKLOAD_NAMES as WORKLOAD_NAMES,
        ConcurrencySweep as ConcurrencySweep,
        KVCapacity as KVCapacity,
        MultiStream as MultiStream,
        Prefill as Prefill,
        RateSweep as RateSweep,
        RunSettings as RunSettings,
        SingleStream as SingleStream,
        TraceReplay as TraceReplay,
        Workload as Workload,
        WorkloadSpec as WorkloadSpec,
        default_workloads as default_workloads,
    )
    from servekit.bench.foreign import read_baseline as read_baseline
    from servekit.bench.options import BenchOptions as BenchOptions, parse_slos as parse_slos
    from servekit.bench.output import write_outputs as write_outputs
    from servekit.bench.plots import write_plots as write_plots
    from servekit.bench.progress import planned_runs as planned_runs
    from servekit.bench.records import RequestRow as RequestRow, read_rows as read_rows
    from servekit.bench.report import (
        TITLES as TITLES,
        render_markdown as render_markdown,
        render_section as render_section,
    )
    from servekit.bench.runner import (
        bench_async as bench_async,
        main as main,
        run_bench as run_bench,
        run_workloads as run_workloads,
    )
    from servekit.bench.schema import (
        SCHEMA_VERSION as SCHEMA_VERSION,
        BenchInputs as BenchInputs,
        BenchResult as BenchResult,
        Figure as Figure,
        Point as Point,
    )
    from servekit.bench.trace import (
        MOONCAKE_BLOCK as MOONCAKE_BLOCK,
        Trace as Trace,
        TraceRequest as TraceRequest,
        read_trace as read_trace,
    )

__getattr__, __dir__ = lazy_face(__name__)
