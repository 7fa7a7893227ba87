"""The documented commands, run as a user runs them: exit codes, printed paths."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.helpers.cli import servekit_cli

from servekit.sim.testing import running_sim

from .support import sim_spec


@pytest.mark.slow
def test_verify_attached_prints_headline_and_report_path(catalog: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with running_sim(sim_spec()) as sim:
        done = servekit_cli(
            "verify", "local/single", "--engine", "sim", "--target", sim.url,
            "--out", str(out), "--catalog", str(catalog), timeout=600,
        )  # fmt: skip
    run = json.loads((out / "run.json").read_text())
    passed = all(
        s["status"] != "fail" for s in run["steps"] if s["name"] in ("up", "accept", "bench")
    )
    assert done.returncode == (0 if passed else 1), done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (out / "report.md").read_text().splitlines()[0]
    assert lines[1].startswith(("**PASS** · [acceptance ", "**FAIL** · [acceptance "))
    assert f"report: {out / 'report.md'}" in lines
    assert f"html:   {out / 'report.html'}" in lines


def test_verify_rejects_an_unknown_engine(catalog: Path) -> None:
    done = servekit_cli("verify", "local/1p1d", "--engine", "gpu", "--catalog", str(catalog))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: --engine: gpu is not an engine; use vllm (real engines) or sim (simulated engines)"
    )


def test_verify_rejects_a_missing_baseline(catalog: Path, tmp_path: Path) -> None:
    done = servekit_cli(
        "verify", "local/1p1d", "--engine", "sim", "--catalog", str(catalog),
        "--baseline", str(tmp_path / "nope.json"),
    )  # fmt: skip
    assert done.returncode == 2
    assert "--baseline" in done.stderr and "Traceback" not in done.stderr


def test_verify_of_hardware_layout_on_this_machine_is_bad_input(
    catalog: Path, tmp_path: Path
) -> None:
    done = servekit_cli(
        "verify", "a3/1p1d", "--catalog", str(catalog), "--out", str(tmp_path / "run"),
        env={**os.environ, "SERVEKIT_RUNS": str(tmp_path / "runs")},
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    # a3/1p1d is an alias: the message names the layout it loads
    assert done.stderr.startswith("error: layout a3/deepseekv4-flash/1p1d needs ascend-a3 hardware")
    assert not (catalog / "a3/deepseekv4-flash/1p1d/verification.jsonl").exists()
    assert not (catalog / "a3/1p1d").exists()


def test_catalog_site_writes_the_index(catalog: Path, tmp_path: Path) -> None:
    done = servekit_cli(
        "catalog", "site", "--out", str(tmp_path / "site"), "--catalog", str(catalog)
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "site" / "index.html")
    assert len(list((tmp_path / "site" / "layouts").glob("*.html"))) == 7 + 25  # 25 imported
