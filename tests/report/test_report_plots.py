"""The HTML report shows the benchmark plots inline (base64 PNG) and stays self-contained."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from servekit.report.build import build_report
from servekit.verify.run import VerifyOptions, VerifyOutcome, verify

from .support import SimRunner, components

IMG = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" alt="([^"]+)">')
PNG = b"\x89PNG\r\n\x1a\n"


def sim_verify(catalog: Path, out: Path, runner: SimRunner) -> VerifyOutcome:
    opts = VerifyOptions(name="local/1p1d", engine="sim", out=out, catalog=str(catalog))
    outcome = verify(opts, components(runner))
    assert outcome.exit_code == 0, [s for s in outcome.run.steps if s.status != "ok"]
    return outcome


@pytest.mark.slow
def test_the_html_report_embeds_every_bench_plot(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    out = sim_verify(catalog, tmp_path / "run", runner)
    html = out.report_html.read_text()
    images = IMG.findall(html)
    titles = [title for _, title in images]
    assert titles == [
        "Multi-stream decode: throughput against load (simulated)",
        "Prefill (cold prefix): throughput against load (simulated)",
    ]
    for (data, _), name in zip(images, ("multi_stream", "prefill"), strict=True):
        png = base64.b64decode(data)
        assert png.startswith(PNG)
        assert png == (out.run_dir / f"bench/plots/{name}.png").read_bytes()
        assert f'href="bench/plots/{name}.png"' in html
    assert "http://" not in html.replace("http://127.0.0.1", "")
    assert "<script src" not in html and "<link" not in html
    md = out.report_md.read_text()
    assert (
        "![Multi-stream decode: throughput against load (simulated)](bench/plots/multi_stream.png)"
        in md
    )
    sums = (out.run_dir / "SHA256SUMS").read_text()
    assert "bench/plots/multi_stream.png" in sums and "bench/plots/prefill.png" in sums


@pytest.mark.slow
def test_rebuilding_the_report_gives_the_same_bytes(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    out = sim_verify(catalog, tmp_path / "run", runner)
    first = out.report_html.read_bytes(), out.report_md.read_bytes()
    build_report(out.run_dir)
    assert (out.report_html.read_bytes(), out.report_md.read_bytes()) == first


def test_stream_counts_are_integer_categories_on_the_axis(tmp_path: Path) -> None:
    """Streams 1 and 4 read 1 and 4 on the axis, not 1.0, 1.5, 2.0, ..."""
    from servekit.bench import plots
    from servekit.bench.schema import Figure, Point

    drawn: list[object] = []
    points = [
        Point(
            workload="multi_stream",
            label=f"x{n}",
            params={"streams": n},
            figures={"total_tok_per_s": Figure(unit="tok/s", median=10.0 * n, min=9.0, max=11.0)},
        )
        for n in (1, 4)
    ]
    real_save = plots._save

    def keep(fig: object, path: Path) -> Path:
        drawn.append(fig)
        return real_save(fig, path)

    plots._save = keep  # type: ignore[assignment]
    try:
        plots.throughput_plot(points, "streams", ("total_tok_per_s",), tmp_path / "m.png")
    finally:
        plots._save = real_save  # type: ignore[assignment]
    (ax,) = drawn[0].axes  # type: ignore[attr-defined]
    assert list(ax.get_xticks()) == [1.0, 4.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "4"]
