"""Write a result's files: bench.json, bench.md, requests.jsonl and the PNG plots."""

from __future__ import annotations

from pathlib import Path

from servekit.bench.plots import write_plots
from servekit.bench.records import RECORDS_FILE, write_rows
from servekit.bench.report import render_markdown
from servekit.bench.schema import BenchResult
from servekit.vocabulary import atomic_write_text


def write_outputs(
    result: BenchResult, out_dir: Path, baseline: BenchResult | None = None
) -> list[Path]:
    """Write everything into ``out_dir`` (each file atomically); the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    result.write(out_dir / "bench.json")
    atomic_write_text(out_dir / "bench.md", render_markdown(result, baseline))
    written = [out_dir / "bench.json", out_dir / "bench.md"]
    if result.requests:
        written.append(write_rows(out_dir / RECORDS_FILE, result.requests))
    return [*written, *write_plots(result, out_dir)]
