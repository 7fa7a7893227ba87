"""Run a list of workloads against a deployment and collect a BenchResult.

``run_bench(BenchOptions)`` is the Python API of ``servekit bench`` (and
:func:`main` the command itself); ``servekit verify`` calls
``run_workloads(deployment, workloads, settings)`` with workloads of its own.
Writing the JSON, Markdown and plots is :func:`servekit.bench.output.write_outputs`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from servekit import __version__
from servekit.bench.config import (
    ConcurrencySweep,
    KVCapacity,
    MultiStream,
    Prefill,
    RateSweep,
    RunSettings,
    SingleStream,
    TraceReplay,
    WorkloadSpec,
    as_workloads,
)
from servekit.bench.context import BenchContext, ProgressFn, quiet
from servekit.bench.foreign import read_baseline
from servekit.bench.options import BenchOptions
from servekit.bench.output import write_outputs
from servekit.bench.progress import planned_runs, rich_progress
from servekit.bench.schema import BenchInputs, BenchResult, Point
from servekit.bench.screen import print_result
from servekit.bench.workloads import (
    kv_capacity,
    multi_stream,
    prefill,
    single_stream,
    sweeps,
    trace,
)
from servekit.client import EndpointError, OpenAIClient
from servekit.deployment import Deployment, load_deployment
from servekit.errors import UsageError

Measure = Callable[[Any, BenchContext], Awaitable[list[Point]]]

MEASURES: dict[type, Measure] = {
    SingleStream: single_stream.measure,
    MultiStream: multi_stream.measure,
    Prefill: prefill.measure,
    RateSweep: sweeps.measure_rate,
    ConcurrencySweep: sweeps.measure_concurrency,
    KVCapacity: kv_capacity.measure,
    TraceReplay: trace.measure,
}


async def bench_async(
    deployment: Deployment,
    workloads: Sequence[WorkloadSpec],
    settings: RunSettings | None = None,
    *,
    target: str | None = None,
    progress: ProgressFn = quiet,
    note: str | None = None,
) -> BenchResult:
    """Measure every workload in order against ``deployment.entry_url``."""
    settings = settings or RunSettings()
    created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    client = OpenAIClient(
        deployment.entry_url,
        settings.api_key,
        model=deployment.model,
        timeout_s=settings.request_timeout_s,
        keep_frames=False,
        keep_body=False,
    )
    async with client:
        model = await _resolve_model(client, deployment)
        versions = dict(deployment.versions) or await _server_versions(client)
        ctx = BenchContext(client, deployment, settings, model=model, progress=progress)
        points: list[Point] = []
        for spec in workloads:
            points += await MEASURES[type(spec)](spec, ctx)
    inputs = BenchInputs(
        target=target or deployment.layout or deployment.entry_url,
        entry_url=deployment.entry_url,
        layout=deployment.layout,
        engine=deployment.engine,
        model=model,
        versions=versions,
        image=deployment.image,
        workloads=as_workloads(workloads),
        settings=settings.model_copy(update={"api_key": None}),
        harness=f"servekit {__version__}",
        note=note,
        sim_speed=deployment.sim_speed if deployment.simulated else None,
    )
    result = BenchResult(
        created=created, inputs=inputs, points=tuple(points), duration_s=time.perf_counter() - t0
    )
    return result.with_requests(ctx.rows)


DISCOVERY_TIMEOUT_S = 30.0


async def _resolve_model(client: OpenAIClient, deployment: Deployment) -> str:
    """The served model, bounded: a server that takes the connection and never answers
    would otherwise hold the run for the full request timeout."""
    try:
        return await asyncio.wait_for(client.resolve_model(), DISCOVERY_TIMEOUT_S)
    except TimeoutError:
        raise UsageError(
            f"--target {deployment.entry_url}: /v1/models did not answer in "
            f"{DISCOVERY_TIMEOUT_S:.0f} s; is the server up and is this its root URL?"
        ) from None
    except EndpointError as exc:
        raise UsageError(
            f"--target {deployment.entry_url}: cannot list models ({exc}); "
            "is the server up and is this its root URL?"
        ) from exc


async def _server_versions(client: OpenAIClient) -> dict[str, str]:
    """The engine's version from GET /version (vLLM answers {"version": ...})."""
    rec = await client.request("GET", "/version")
    data = rec.json_body() if rec.ok else None
    if isinstance(data, dict) and isinstance(data.get("version"), str):
        return {"engine": data["version"]}
    return {}


def run_workloads(
    deployment: Deployment,
    workloads: Sequence[WorkloadSpec],
    settings: RunSettings | None = None,
    *,
    target: str | None = None,
    progress: ProgressFn = quiet,
    note: str | None = None,
) -> BenchResult:
    """Synchronous :func:`bench_async` (``servekit verify`` calls it with its own workloads)."""
    return asyncio.run(
        bench_async(deployment, workloads, settings, target=target, progress=progress, note=note)
    )


def run_bench(
    options: BenchOptions,
    *,
    deployment: Deployment | None = None,
    progress: ProgressFn = quiet,
) -> BenchResult:
    """The Python API of ``servekit bench``: measure what ``options`` describe.

    The target is ``options.target`` unless the caller already holds its
    ``deployment``; writing the files is :func:`~servekit.bench.output.write_outputs`.
    """
    return run_workloads(
        deployment or load_deployment(options.target),
        options.workloads(),
        options.settings(),
        target=options.target,
        progress=progress,
        note=options.note,
    )


def default_out() -> Path:
    """``.servekit/bench/<UTC time>``."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(".servekit/bench") / stamp


def main(options: BenchOptions, console: Console | None = None) -> int:
    """``servekit bench``: run under a progress display, write the files, print the tables.

    Exit code 0 when every measured request succeeded, 1 when any failed (the
    figures are still written: errors are counted, not hidden) or when the
    engine never became idle.
    """
    console = console or Console()
    baseline = read_baseline(options.baseline) if options.baseline else None
    deployment = load_deployment(options.target)
    total = planned_runs(options.workloads(), options.runs)
    try:
        with rich_progress(console, total=total) as progress:
            result = run_bench(options, deployment=deployment, progress=progress)
    except TimeoutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    paths = write_outputs(result, options.out or default_out(), baseline)
    print_result(console, result, baseline)
    console.print(f"wrote {', '.join(str(p) for p in paths)}")
    errors = sum(p.errors for p in result.points)
    if errors:
        console.print(f"[red]{errors} measured request(s) failed; see bench.json error_kinds[/red]")
    return 1 if errors else 0
