"""The verify report in headless Chromium: every bench plot loads from the page itself."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from . import chromium
from .support import SimRunner
from .test_report_plots import PNG, sim_verify

pytestmark = pytest.mark.tools

IMAGES = (
    "[...document.querySelectorAll('#plots img')].map(i => "
    "[i.complete, i.naturalWidth, i.naturalHeight, i.src.slice(0, 22), i.alt])"
)


def test_chromium_draws_the_plots_from_the_report_alone(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    if chromium.binary() is None:
        pytest.fail("chromium is not installed; run scripts/bootstrap.sh tools")
    out = sim_verify(catalog, tmp_path / "run", runner)
    page = tmp_path / "alone" / "report.html"  # no run folder beside it: inline or nothing
    page.parent.mkdir()
    page.write_bytes(out.report_html.read_bytes())
    with chromium.devtools(page.as_uri()) as ws:
        images: list[list[object]] = []
        for _ in range(300):  # the first target may still be about:blank
            (ready,) = chromium.evaluate(ws, "document.readyState === 'complete'")
            (images,) = chromium.evaluate(ws, IMAGES)
            if ready and images:
                break
            time.sleep(0.1)
    assert len(images) == 2
    for complete, width, height, src, alt in images:
        assert complete is True
        assert isinstance(width, int) and width > 200
        assert isinstance(height, int) and height > 100
        assert src == "data:image/png;base64,"
        assert "throughput against load" in str(alt)
    shot = chromium.screenshot(page.as_uri(), tmp_path / "report.png", size="1280,3000")
    assert shot.read_bytes().startswith(PNG)
