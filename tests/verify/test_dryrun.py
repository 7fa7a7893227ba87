"""The cluster dry run: a3/1p1d's rendered ModelArts entry on two loopback nodes, verified.

Every node runs ``run.sh`` under dash against a real rank table, with
``NODE_POD_NAME``, ``BIND_HOST`` (its own 127.0.0.x), ``NODE_NIC=lo``,
``WORK_DIR``/``LOG_DIR`` in a temporary folder and the two-line simulated
``vllm`` on PATH (acceptance at a fast simulated speed). Then:

- ``servekit verify a3/1p1d --target URL --nodes IP,IP --logs DIR`` passes with
  the same acceptance N/N, the same checks and the same set of figures as
  ``servekit verify a3/1p1d --engine sim`` started here;
- ``verify --target URL`` alone (engines only through the proxy) still measures
  every figure, and the guard check says it needs --nodes;
- teardown leaves no process and no temporary folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.cli import own_homes, servekit_cli, wide_env

from servekit.catalog.ledger import (
    NOT_OBSERVED,
    VerificationStatus,
    ledger_records,
    verification_status,
)
from servekit.catalog.loader import load
from servekit.platforms import DryCluster, dry_cluster, leftovers
from servekit.render.views import list_rows
from servekit.verify.adapters import real_components
from servekit.verify.options import VerifyOptions
from servekit.verify.run import verify

LAYOUT = "a3/1p1d"  # an alias: runs, reports and the list name the layout it loads
NAME = "a3/deepseekv4-flash/1p1d"
SPEED = 10.0


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Private run, report and ledger folders for every verify of this module."""
    root = tmp_path_factory.mktemp("dryrun-homes")
    env = own_homes(root)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield env


@pytest.fixture(scope="module")
def cluster(homes: dict[str, str]) -> Iterator[DryCluster]:
    """The running dry-run cluster; its teardown is checked when the module ends."""
    with dry_cluster(LAYOUT, speed=SPEED) as running:
        yield running
    assert leftovers(running) == [], "processes of the dry run outlived its teardown"
    assert not running.root.exists(), "the dry run's temporary folder was left behind"


def summary(run_dir: Path) -> dict[str, Any]:
    """What two runs must agree on: N/N, each check's verdict, the figures measured."""
    accept = json.loads((run_dir / "accept" / "result.json").read_text())
    bench = json.loads((run_dir / "bench" / "bench.json").read_text())
    checks = {c["id"]: c["verdict"] for c in accept["checks"]}
    passed = sum(v == "pass" for v in checks.values())
    ran = sum(v != "skip" for v in checks.values())
    figures = {
        (p["workload"], p["label"], name)
        for p in bench["points"]
        for name, fig in p["figures"].items()
        if fig["median"] is not None
    }
    return {"n_of_n": f"{passed}/{ran}", "checks": checks, "figures": figures}


@pytest.fixture(scope="module")
def local_run(homes: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``servekit verify a3/1p1d --engine sim --speed 10`` started on this machine."""
    out = tmp_path_factory.mktemp("local") / "run"
    opts = VerifyOptions(name=LAYOUT, engine="sim", speed=SPEED, out=out, no_baseline=True)
    outcome = verify(opts, real_components())
    assert outcome.exit_code == 0, [s for s in outcome.run.steps if s.status != "ok"]
    run = outcome.run
    assert (run.accept_speed, run.bench_speed) == (SPEED, 1.0)  # benchmarks at real time
    bench = run.step("bench")
    assert bench is not None and "restarted at that speed after acceptance" in bench.detail
    assert "acceptance at 10x, benchmarks at 1x" in outcome.report_md.read_text()
    return out


def decode_tok_s(run_dir: Path) -> float:
    """The single-stream decode figure (tok/s) of a run."""
    bench = json.loads((run_dir / "bench" / "bench.json").read_text())
    point = next(p for p in bench["points"] if p["workload"] == "single_stream")
    return float(point["figures"]["tok_per_s"]["median"])


@pytest.fixture(scope="module")
def nodes_run(
    cluster: DryCluster, homes: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, VerificationStatus]:
    """Issue 22's dry run: ``verify NAME --target URL --nodes ...`` with no --engine flag;
    the run folder and the layout's status before it."""
    before = verification_status(load(LAYOUT))
    out = tmp_path_factory.mktemp("nodes") / "cluster"
    args = [*cluster.verify_args(), "--quick", "--out", str(out), "--no-baseline"]
    assert args[:3] == [LAYOUT, "--target", cluster.entry_url]
    done = servekit_cli("verify", *args, env=wide_env(**homes), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"# Verification of {NAME}: PASS (simulated)")
    return out, before


@pytest.mark.slow
def test_verify_with_nodes_equals_the_local_simulated_run(
    cluster: DryCluster,
    local_run: Path,
    nodes_run: tuple[Path, VerificationStatus],
    homes: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The dry run is recorded simulated, whatever no flag said, and verifies nothing."""
    monkeypatch.setenv("XDG_DATA_HOME", homes["XDG_DATA_HOME"])  # the ledger verify wrote
    loaded = load(LAYOUT)
    out, before = nodes_run
    record = ledger_records(loaded)[-1]
    assert record.report == str(out.resolve()) and record.engine == "sim"
    assert record.image == NOT_OBSERVED and record.versions == {}
    assert record.observed is not None
    assert record.observed["engine"] == "20/20 engines answered as servekit's simulator"
    # the preflight the nodes ran before their engines, as they reported it (--logs)
    assert record.observed["preflight"].startswith("passed on 2 units at ")
    assert "(32 NPU IPs, 32 peer pings, TLS switch [0]; " in record.observed["preflight"]
    after = verification_status(loaded)
    assert after.state == before.state != "verified"
    # layouts list: model, name, hardware, nodes, topology, source says, status, derived
    cells, why = next(row for row in list_rows(None) if row[0][1] == NAME)
    assert cells[6] == before.state and "simulated run passed" in why
    got, want = summary(out), summary(local_run)
    assert got["n_of_n"] == want["n_of_n"] == "28/28"
    assert got["checks"] == want["checks"]
    assert got["figures"] == want["figures"]
    run = json.loads((out / "run.json").read_text())
    assert run["accept_speed"] == SPEED and run["target"] == cluster.entry_url
    assert run["files"]["preflight"] == "preflight.json"
    preflight = json.loads((out / "preflight.json").read_text())
    assert preflight["verdict"] == "pass" and [u["npu_ips"] for u in preflight["units"]] == [16, 16]
    assert "- Preflight: [passed on 2 units" in (out / "report.md").read_text()
    local = json.loads((local_run / "run.json").read_text())
    assert local["observed"]["preflight"].startswith("not observed: started on this machine")
    assert {s["name"]: s["status"] for s in run["steps"]}["down"] == "skipped"
    dep = json.loads((out / "deployment.json").read_text())
    assert dep["engine_access"] == "direct" and len(dep["endpoints"]) == 21
    assert dep["entry_url"] == "http://" + cluster.addresses[0] + ":8080"
    assert {e["url"].rsplit(":", 1)[0] for e in dep["endpoints"]} == {
        f"http://{a}" for a in cluster.addresses
    }
    errors = next(
        c for c in json.loads((out / "accept" / "result.json").read_text())["checks"]
        if c["id"] == "service.error_logs"
    )  # fmt: skip
    assert errors["verdict"] == "pass" and errors["measurements"]["logs"] == 21


@pytest.mark.slow
def test_an_engine_flag_the_engines_contradict_is_refused_in_one_line(
    cluster: DryCluster, homes: dict[str, str], tmp_path: Path
) -> None:
    args = [*cluster.verify_args(), "--engine", "vllm", "--quick", "--out", str(tmp_path / "r")]
    done = servekit_cli("verify", *args, env=wide_env(**homes), timeout=600)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "--engine vllm: the engines behind" in done.stderr
    assert "answer as servekit's simulator" in done.stderr
    assert not (tmp_path / "r").exists()  # nothing half-written


@pytest.mark.slow
def test_verify_through_the_proxy_alone_measures_every_figure(
    cluster: DryCluster,
    local_run: Path,
    nodes_run: tuple[Path, VerificationStatus],
    tmp_path: Path,
) -> None:
    out = tmp_path / "relay"
    opts = VerifyOptions(
        name=LAYOUT,
        engine="sim",
        target=cluster.entry_url,
        logs=cluster.logs,
        reference=cluster.reference_url,
        speed=SPEED,  # the engines are out of reach: the speed is declared
        out=out,
        no_baseline=True,
    )
    outcome = verify(opts, real_components())
    assert outcome.exit_code == 0, [s for s in outcome.run.steps if s.status != "ok"]
    assert outcome.run.engine == "sim"  # told by servekit_sim_info in the relayed metrics
    # One cluster at one speed, measured through --nodes and through the relay: the
    # single-stream figure means the same (it was 10x apart, issue 22).
    direct, relayed = decode_tok_s(nodes_run[0]), decode_tok_s(out)
    assert 1 / 3 < relayed / direct < 3, (direct, relayed)
    got, want = summary(out), summary(local_run)
    assert got["figures"] == want["figures"]
    assert got["n_of_n"] == "27/27"
    guard = json.loads((out / "accept" / "result.json").read_text())["checks"]
    reason = next(c["reason"] for c in guard if c["id"] == "guard.decode_direct")
    assert "need direct access" in reason or "needs direct" in reason
    assert "pass --nodes" in reason
    differing = {k for k in want["checks"] if got["checks"][k] != want["checks"][k]}
    assert differing == {"guard.decode_direct"}
    assert outcome.run.accept_speed == outcome.run.bench_speed == SPEED
    dep = json.loads((out / "deployment.json").read_text())
    assert dep["engine_access"] == "relay"
    assert [e["url"] for e in dep["endpoints"] if e["name"] == "decode0.dp15"] == [
        f"http://{cluster.addresses[1]}:7115"
    ]


@pytest.mark.slow
def test_accept_and_bench_take_the_clusters_deployment_file(
    cluster: DryCluster, homes: dict[str, str], tmp_path: Path
) -> None:
    dep = tmp_path / "deployment.json"
    nodes = ",".join(cluster.addresses)
    made = servekit_cli(
        "deployment", LAYOUT, "--nodes", nodes, "--out", str(dep), "--logs", str(cluster.logs),
        "--engine", "sim", "--speed", "10", env={**os.environ, **homes},
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    accept = servekit_cli(
        "accept", "--target", str(dep), "--only", "service", "--only", "guard",
        "--out", str(tmp_path / "accept"), env={**os.environ, **homes}, timeout=600,
    )  # fmt: skip
    assert accept.returncode == 0, accept.stdout + accept.stderr
    result = json.loads((tmp_path / "accept" / "result.json").read_text())
    assert {c["id"]: c["verdict"] for c in result["checks"]} == {
        "service.health": "pass",
        "service.models": "pass",
        "service.proxy_health": "pass",
        "service.error_logs": "pass",
        "guard.decode_direct": "pass",
    }
    assert result["sim_speed"] == SPEED
    bench = servekit_cli(
        "bench", "--target", str(dep), "--workload", "kv", "--out", str(tmp_path / "bench"),
        env={**os.environ, **homes}, timeout=600,
    )  # fmt: skip
    assert bench.returncode == 0, bench.stderr
    points = json.loads((tmp_path / "bench" / "bench.json").read_text())["points"]
    assert len(points) == 20
    assert {p["evidence"]["source"] for p in points} == {"engine log"}
