"""``servekit bench``: measure a deployment; see docs/bench.md."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Attach the ``bench`` command to the root app."""
    app.command("bench")(bench)


def bench(  # noqa: PLR0917 - typer maps one parameter per documented flag
    target: Annotated[str, typer.Option(help="URL of the server, or a layout run by 'up'")],
    workload: Annotated[
        list[str] | None,
        typer.Option(help="single, multi, prefill, rate, concurrency, kv (repeatable)"),
    ] = None,
    runs: Annotated[int, typer.Option(help="runs per figure (the median is reported)")] = 3,
    warmup: Annotated[int, typer.Option(help="warm-up requests per workload")] = 1,
    isl: Annotated[int | None, typer.Option(help="prompt tokens (default 1024)")] = None,
    osl: Annotated[int | None, typer.Option(help="output tokens (default 256)")] = None,
    streams: Annotated[str | None, typer.Option(help="multi-stream N, e.g. 1,4,8,16")] = None,
    prefill_streams: Annotated[str | None, typer.Option(help="prefill N, e.g. 1,2,4")] = None,
    rates: Annotated[str | None, typer.Option(help="request rates per second, e.g. 1,2,4")] = None,
    arrival: Annotated[str, typer.Option(help="constant or poisson")] = "poisson",
    concurrency: Annotated[str | None, typer.Option(help="concurrencies, e.g. 1,4,16")] = None,
    requests: Annotated[int | None, typer.Option(help="requests per sweep point and run")] = None,
    slo: Annotated[
        list[str] | None, typer.Option(help="goodput SLO NAME=MS (ttft, tpot, e2el)")
    ] = None,
    baseline: Annotated[Path | None, typer.Option(help="a saved bench.json to compare")] = None,
    out: Annotated[Path | None, typer.Option(help="output folder")] = None,
    idle_timeout: Annotated[
        float, typer.Option(help="seconds to wait for an idle engine before each run")
    ] = 120.0,
    api_key: Annotated[str | None, typer.Option(envvar="SERVEKIT_API_KEY")] = None,
    note: Annotated[str | None, typer.Option(help="a note stored with the result")] = None,
) -> None:
    """Measure decode, prefill, sweeps and KV capacity; write JSON, Markdown and plots."""
    from servekit.bench.cli_main import BenchArgs, main

    code = main(
        BenchArgs(
            target=target,
            workloads=tuple(workload or ()),
            runs=runs,
            warmup=warmup,
            isl=isl,
            osl=osl,
            streams=streams,
            prefill_streams=prefill_streams,
            rates=rates,
            arrival=arrival,
            concurrency=concurrency,
            requests=requests,
            slo=tuple(slo or ()),
            baseline=baseline,
            out=out,
            idle_timeout=idle_timeout,
            api_key=api_key,
            note=note,
        )
    )
    raise typer.Exit(code)
