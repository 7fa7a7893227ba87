"""A derived layout is a layout like any other: it renders, runs on the simulator, verifies.

Its status stays ``derived``: a simulated verify is recorded in its ledger as
simulated, never as verified.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.cli import runs_env, servekit_cli

from servekit.catalog.ledger import verification_status
from servekit.catalog.loader import load, packaged_catalog

BASE = "a3/deepseekv4-flash/1p1d"
NAME = "a3/deepseekv4-flash/2p1d"


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = runs_env(tmp_path)
    yield env
    servekit_cli("down", NAME, env=env)


@pytest.mark.slow
def test_derived_layout_renders_runs_and_verifies_on_sim(
    env: dict[str, str], tmp_path: Path
) -> None:
    catalog = tmp_path / "catalog"
    shutil.copytree(packaged_catalog() / "a3" / "profiles", catalog / "a3" / "profiles")
    shutil.copytree(packaged_catalog() / BASE, catalog / BASE)
    new = servekit_cli("layouts", "new", NAME, "--from", BASE, "--catalog", str(catalog), env=env)
    assert new.returncode == 0, new.stderr
    assert verification_status(load(NAME, catalog)).state == "derived"

    check = servekit_cli("layouts", "check", NAME, "--strict", "--catalog", str(catalog), env=env)
    # --strict passes it: "not separately validated" is its status (derived), no warning.
    assert check.returncode == 0, check.stdout + check.stderr
    assert "0 error(s), 0 warning(s)" in check.stdout, check.stdout

    out = tmp_path / "rendered"
    render = servekit_cli("render", NAME, "--catalog", str(catalog), "--out", str(out), env=env)
    assert render.returncode == 0, render.stderr
    assert (out / "plan.json").is_file()

    up = servekit_cli(
        "up", NAME, "--engine", "sim", "--speed", "40", "--detach", "--catalog", str(catalog),
        env=env, timeout=600,
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    down = servekit_cli("down", NAME, env=env)
    assert down.returncode == 0, down.stderr
    assert f"{NAME}: stopped" in down.stdout
    status = servekit_cli("status", NAME, env=env)
    assert "ready" not in status.stdout, status.stdout

    verify = servekit_cli(
        "verify",
        NAME,
        "--engine",
        "sim",
        "--speed",
        "40",
        "--catalog",
        str(catalog),
        "--out",
        str(tmp_path / "report"),
        env=env,
        timeout=600,
    )
    assert verify.returncode == 0, (verify.stdout[-3000:], verify.stderr[-1500:])
    status = verification_status(load(NAME, catalog))
    assert status.state == "derived"
    assert "simulated run passed" in status.reason
