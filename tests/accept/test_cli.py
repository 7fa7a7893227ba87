"""`servekit accept` as users run it: exit 0 all pass, 1 any failure, 2 usage error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers.cli import runs_env, servekit_cli, servekit_inproc

from servekit.sim.testing import running_sim

from .conftest import SELFCHECK_GROUP, SelfcheckRun
from .stacks import sim_pd

# No inherited environment: the command must run on what it is given.
BARE = {"PATH": "/usr/bin:/bin"}
ONE = {"endpoints": [{"name": "m", "port": 0, "max_model_len": 8192}]}


def test_passing_url_target_exits_0_and_writes_result_and_markdown(tmp_path: Path) -> None:
    with running_sim(ONE) as sim:
        proc = servekit_cli(
            "accept", "--target", sim.url, "--capability", "retrieval", "--context", "2k",
            "--only", "api", "--only", "needle.2k", "--out", "res",
            cwd=tmp_path, env=runs_env(tmp_path, BARE), timeout=300,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "res" / "result.json").read_text())
    assert {c["verdict"] for c in doc["checks"]} == {"pass", "skip"}
    assert len(doc["checks"]) == 7 + 11
    assert "Acceptance: 16/16 passed" in (tmp_path / "res" / "accept.md").read_text()
    assert "needle.2k.turn3" in proc.stdout
    # live progress, one line per check, on stderr
    assert "PASS needle.2k.A" in proc.stderr


def test_a_failing_check_exits_1(tmp_path: Path) -> None:
    with running_sim(ONE) as sim:
        sim.set_faults(misbehave="wrong_code")
        proc = servekit_cli(
            "accept", "--target", sim.url, "--capability", "retrieval", "--context", "2k",
            "--only", "needle.2k.A", "--out", "res",
            cwd=tmp_path, env=runs_env(tmp_path, BARE), timeout=300,
        )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL" in proc.stdout


def test_layout_name_target_reads_deployment_json(tmp_path: Path) -> None:
    with sim_pd(tmp_path) as stack:
        run_dir = tmp_path / "runs" / "local__1p1d"
        run_dir.mkdir(parents=True)
        (run_dir / "deployment.json").write_text(stack.deployment.model_dump_json())
        proc = servekit_cli(
            "accept", "--target", "local/1p1d", "--only", "guard", "--out", "o",
            cwd=tmp_path, env=runs_env(tmp_path, BARE), timeout=300,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "guard.decode_direct" in proc.stdout


def test_usage_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    cases = [
        ("--context", "12q", "--target", "http://127.0.0.1:9"),
        ("--only", "nosuchcheck", "--target", "http://127.0.0.1:9"),
        ("--depths", "0.5", "--target", "http://127.0.0.1:9"),
        ("--concurrency", "1", "--target", "http://127.0.0.1:9"),
        ("--timeout", "0", "--target", "http://127.0.0.1:9"),
        ("--concurrency", "1000000000", "--target", "http://127.0.0.1:9"),
        ("--timeout", "inf", "--target", "http://127.0.0.1:9"),
        ("--timeout", "nan", "--target", "http://127.0.0.1:9"),
        ("--seed", "", "--target", "http://127.0.0.1:9"),
        ("--target", "http://127.0.0.1:99999"),
        ("--target", "http://[::1"),
        ("--only", "guard"),
        ("--target", "local/not-running"),
    ]
    for args in cases:
        proc = servekit_inproc("accept", *args, cwd=tmp_path, env=runs_env(tmp_path, BARE))
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert proc.stderr.startswith("error: ")
        assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "accept-out").exists()  # nothing written for a refused command


@pytest.mark.slow
@SELFCHECK_GROUP
def test_selfcheck_exits_0_and_writes_its_matrix(selfcheck_run: SelfcheckRun) -> None:
    proc, out = selfcheck_run.proc, selfcheck_run.out
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((out / "result.json").read_text())
    assert doc["checks"] and all(r["verdict"] == "pass" for r in doc["checks"])
    assert "(simulated)" in (out / "accept.md").read_text()


def test_list_names_every_check(tmp_path: Path) -> None:
    proc = servekit_cli(
        "accept", "--list", "--context", "144k,1m", cwd=tmp_path, env=runs_env(tmp_path, BARE)
    )
    assert proc.returncode == 0
    ids = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    assert "guard.decode_direct" in ids
    assert sum(i.startswith("needle.144k.") for i in ids) == 11
    assert sum(i.startswith("needle.1m.") for i in ids) == 11


def test_a_server_that_never_answers_is_one_line_not_hours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It takes the connection and says nothing: before, every check waited its 600 s."""
    import asyncio

    from tests.proxy.backends import black_hole

    from servekit.accept import runner
    from servekit.accept.options import AcceptOptions
    from servekit.deployment import Deployment
    from servekit.errors import UsageError

    monkeypatch.setattr(runner, "DISCOVERY_TIMEOUT_S", 0.5)

    async def scenario() -> None:
        url, server = await black_hole()
        try:
            with pytest.raises(UsageError, match=r"/v1/models did not answer in 0 s"):
                await runner.run_acceptance_async(
                    Deployment(entry_url=url), AcceptOptions(), tmp_path / "out"
                )
        finally:
            server.close()

    asyncio.run(scenario())
    assert not (tmp_path / "out" / "result.json").exists()
