"""The catalog site in headless Chromium: filters really filter, and it renders."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from servekit.catalog.loader import load_all
from servekit.report.site import build_site
from servekit.report.site.topology import classify

from . import chromium
from .test_site import index_rows

pytestmark = pytest.mark.tools

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def site(catalog: Path, tmp_path: Path) -> Path:
    if chromium.binary() is None:
        pytest.fail("chromium is not installed; run scripts/bootstrap.sh tools")
    return build_site(tmp_path / "site", str(catalog))


def visible(dom: str) -> set[str]:
    return {name for name, attrs in index_rows(dom).items() if "hidden" not in attrs}


def expected(catalog: Path, hw: str | None = None, kind: str | None = None) -> set[str]:
    return {
        item.layout.name
        for item in load_all(str(catalog))
        if (hw is None or item.layout.name.startswith(hw + "/"))
        and (kind is None or classify(item.layout).kind == kind)
    }


def test_no_filter_shows_everything(catalog: Path, site: Path) -> None:
    dom = chromium.dump_dom(site.as_uri())
    assert visible(dom) == expected(catalog)
    assert f"{len(expected(catalog))} of {len(expected(catalog))} layouts" in dom


@pytest.mark.parametrize(
    ("fragment", "hw", "kind"),
    [
        ("#topology=pd", None, "pd"),
        ("#hw=a3&topology=pd", "a3", "pd"),
        ("#hw=local", "local", None),
    ],
)
def test_hash_filters_hide_the_other_rows(
    catalog: Path, site: Path, fragment: str, hw: str | None, kind: str | None
) -> None:
    dom = chromium.dump_dom(site.as_uri() + fragment)
    want = expected(catalog, hw, kind)
    assert visible(dom) == want
    assert f"{len(want)} of {len(expected(catalog))} layouts" in dom


def test_status_filter_shows_only_derived_layouts(site: Path) -> None:
    dom = chromium.dump_dom(site.as_uri() + "#status=derived")
    # the hand-made a3/1p3d, a3/2p2d and a3/3p1d, listed by their layouts' names
    assert visible(dom) == {f"a3/deepseekv4-flash/{t}" for t in ("1p3d", "2p2d", "3p1d")}


def test_choosing_a_filter_in_the_page_updates_rows_count_and_hash(
    catalog: Path, site: Path
) -> None:
    with chromium.devtools(site.as_uri()) as ws:
        for _ in range(300):  # the first target may still be about:blank
            (ready,) = chromium.evaluate(
                ws, "document.readyState === 'complete' && !!document.getElementById('count')"
            )
            if ready:
                break
            time.sleep(0.1)
        assert ready, "the index never loaded in chromium"
        shown, hash_, names = chromium.evaluate(
            ws,
            "(() => { const s = document.getElementById('f-topology'); s.value = 'dp';"
            " s.dispatchEvent(new Event('change')); return document.getElementById('count')"
            ".dataset.shown; })()",
            "location.hash",
            "[...document.querySelectorAll('tr.layout:not([hidden])')].map(r => r.dataset.name)",
        )
    want = expected(catalog, kind="dp")
    assert int(shown) == len(want)
    assert hash_ == "#topology=dp"
    assert set(names) == want


def test_screenshots_of_index_and_a_layout_page(site: Path, tmp_path: Path) -> None:
    shots = [
        chromium.screenshot(site.as_uri() + "#topology=pd", tmp_path / "index.png"),
        chromium.screenshot(
            (site.parent / "layouts" / "a3__deepseekv4-flash__1p3d.html").as_uri(),
            tmp_path / "layout.png",
        ),
    ]
    for shot in shots:
        data = shot.read_bytes()
        assert data.startswith(PNG)
        assert len(data) > 20_000  # a rendered page, not a blank canvas
