"""The documented commands through servekit's real runner (detached supervisor).

``servekit verify a3/1p1d --engine sim`` (an alias of a3/deepseekv4-flash/1p1d)
dry-runs the real A3 catalog layout (4 prefill + 16 decode simulated DP ranks
behind servekit's proxy) end to end;
``servekit verify local/1p1d`` runs real vLLM CPU engines (marker vllm).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers.cli import servekit_cli as servekit, wide_env

from servekit.catalog.ledger import read_records

# Each verify has its own 1200 s deadline; pytest's 900 s must not cut it short.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def _check_run(catalog: Path, name: str, out: Path, engine: str, stdout: str) -> None:
    lines = stdout.splitlines()
    report = (out / "report.md").read_text().splitlines()
    assert (
        lines[0]
        == report[0]
        == f"# Verification of {name}: PASS" + (" (simulated)" if engine == "sim" else "")
    )
    assert lines[1].startswith("**PASS** · [acceptance ")
    assert "single-stream decode" in lines[1] and "prefill" in lines[1]
    (record,) = read_records(catalog / name / "verification.jsonl")
    assert record.engine == engine and record.result == "pass"
    assert record.report == str(out)
    run = json.loads((out / "run.json").read_text())
    assert {s["name"]: s["status"] for s in run["steps"]}["down"] == "ok"


def _failed_checks(out: Path) -> str:
    """The failed acceptance checks and their reasons, for the assertion message."""
    try:
        checks = json.loads((out / "accept/result.json").read_text())["checks"]
    except (OSError, ValueError, KeyError):
        return "no accept/result.json\n"
    return "".join(f"{c['id']}: {c['reason']}\n" for c in checks if c["verdict"] == "fail")


@pytest.mark.slow
def test_verify_a3_1p1d_on_simulated_engines(catalog: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = servekit(
        "verify", "a3/1p1d", "--engine", "sim", "--catalog", str(catalog), "--out", str(out),
        env=wide_env(SERVEKIT_RUNS=str(tmp_path / "runs")), timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, _failed_checks(out) + done.stdout[-3000:] + done.stderr[-3000:]
    # a3/1p1d is an alias: the run is the layout's, recorded under its name and folder
    _check_run(catalog, "a3/deepseekv4-flash/1p1d", out, "sim", done.stdout)
    assert not (catalog / "a3/1p1d").exists()
    deployment = json.loads((out / "deployment.json").read_text())
    roles = [e["role"] for e in deployment["endpoints"]]
    assert roles.count("prefill") == 4 and roles.count("decode") == 16
    md = (out / "report.md").read_text()
    assert (
        "servekit render a3/deepseekv4-flash/1p1d --target modelarts"
        " --out out/a3-deepseekv4-flash-1p1d"
    ) in md
    assert "was hardware-verified" not in md  # the report judges the run, not the seed


@pytest.mark.vllm
def test_verify_local_1p1d_on_real_vllm(catalog: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = servekit(
        "verify", "local/1p1d", "--catalog", str(catalog), "--out", str(out),
        env=wide_env(SERVEKIT_RUNS=str(tmp_path / "runs")), timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, _failed_checks(out) + done.stdout[-3000:] + done.stderr[-3000:]
    _check_run(catalog, "local/1p1d", out, "vllm", done.stdout)
    (record,) = read_records(catalog / "local/1p1d" / "verification.jsonl")
    assert record.observed is not None  # identified from what the engines answered
    assert record.observed["engine"] == "2/2 engines: GET /version, Server: uvicorn, vLLM metrics"
    assert record.versions == {"vllm": "0.32.0"} and record.image == "not observed"
    md = (out / "report.md").read_text()
    assert "(simulated)" not in md.split("## Honest boundaries")[0]
