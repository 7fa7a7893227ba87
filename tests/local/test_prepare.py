"""Preparing a run does what a user would otherwise do by hand, and says so in one line each."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.helpers.cli import servekit_cli

from servekit.catalog.loader import load
from servekit.deployment import load_deployment
from servekit.errors import UsageError
from servekit.local.options import UpOptions
from servekit.local.prepare import prepare_run
from servekit.local.rundir import RunDir
from servekit.local.tinymodel.ondemand import ensure_tiny_model, serves_tiny_model


@pytest.mark.slow
def test_the_tiny_model_is_built_when_a_cpu_layout_needs_it(
    tmp_path: Path, runs_root: Path
) -> None:
    pytest.importorskip("vllm", reason="the model is built after the engine check")
    spec = prepare_run(UpOptions(name="local/single", free_ports=True), cwd=tmp_path)
    model = tmp_path / ".servekit/models/tiny"
    assert (model / "config.json").is_file() and (model / "model.safetensors").is_file()
    built = [n for n in spec.notes if "built the tiny model" in n]
    assert len(built) == 1 and "\n" not in built[0]
    assert "servekit model tiny" in built[0]
    assert not RunDir(spec.run_dir).state.exists()  # prepared, nothing started


def test_an_existing_model_folder_is_never_touched(tmp_path: Path) -> None:
    layout = load("local/single").layout
    mine = tmp_path / ".servekit/models/tiny"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    assert ensure_tiny_model(layout, tmp_path) is None
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_only_cpu_layouts_of_the_tiny_model_get_it_built(tmp_path: Path) -> None:
    assert serves_tiny_model(load("local/1p1d").layout)
    assert not serves_tiny_model(load("a3/1p1d").layout)
    assert ensure_tiny_model(load("a3/1p1d").layout, tmp_path) is None
    assert not (tmp_path / ".servekit").exists()


@pytest.mark.slow
def test_a_multi_node_layout_comes_up_on_the_simulator_without_free_ports(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "SERVEKIT_RUNS": str(tmp_path / "runs")}
    up = servekit_cli(
        "up", "a3/1p1d", "--engine", "sim", "--detach", cwd=tmp_path, env=env, timeout=300
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        notes = [line for line in (up.stdout + up.stderr).splitlines() if "free local" in line]
        assert len(notes) == 1 and "a3/deepseekv4-flash/1p1d plans 2 nodes" in notes[0]
        dep = json.loads((tmp_path / "runs/a3__1p1d/deployment.json").read_text())
        assert len({e["url"] for e in dep["endpoints"]}) == len(dep["endpoints"])
    finally:
        down = servekit_cli("down", "a3/1p1d", cwd=tmp_path, env=env, timeout=300)
    assert down.returncode == 0, down.stderr


def test_a_run_is_found_and_guarded_by_every_name_of_its_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Up under an old name (an alias), then status, --target (accept, bench, verify read
    it through load_deployment), a second up and down by the layout's own name: one run,
    found, refused twice, stopped by either name."""
    env = {**os.environ, "SERVEKIT_RUNS": str(tmp_path / "runs")}
    real = "a3/deepseekv4-flash/1p1d"
    up = servekit_cli(
        "up", "a3/1p1d", "--engine", "sim", "--detach", "--free-ports",
        cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        status = servekit_cli("status", real, "--json", cwd=tmp_path, env=env, timeout=60)
        assert status.returncode == 0, status.stderr
        (run,) = json.loads(status.stdout)
        assert run["phase"] == "ready" and "runs/a3__1p1d/" in status.stdout
        other = servekit_cli("status", "a3/deepseekv4-flash/2p2d", "--json", cwd=tmp_path, env=env)
        assert "a3__1p1d" not in other.stdout  # control: another layout's name finds nothing
        monkeypatch.setenv("SERVEKIT_RUNS", env["SERVEKIT_RUNS"])
        assert load_deployment(real).entry_url == load_deployment("a3/1p1d").entry_url
        with pytest.raises(UsageError, match="no running deployment"):
            load_deployment("a3/deepseekv4-flash/2p2d")  # control: not by another layout's
        twice = servekit_cli(
            "up", real, "--engine", "sim", "--detach", "--free-ports",
            cwd=tmp_path, env=env, timeout=300,
        )  # fmt: skip
        assert twice.returncode == 2, twice.stdout + twice.stderr
        assert "a3/1p1d" in twice.stderr and "servekit down" in twice.stderr
    finally:
        down = servekit_cli("down", real, cwd=tmp_path, env=env, timeout=300)
    assert down.returncode == 0, down.stderr
    assert f"{real}: stopped" in down.stdout


def test_hiding_broken_companions_keeps_the_guard_bundle_on_pythonpath(
    tmp_path: Path, runs_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decode guard loads from the run's bundle folder even when companions are hidden."""
    pytest.importorskip("vllm", reason="engine launches are prepared after the engine check")
    from servekit.local import companions

    broken = (companions.Broken("torchvision", "0.28.0", "operator does not exist"),)
    monkeypatch.setattr(companions, "find_broken", lambda: broken)
    spec = prepare_run(UpOptions(name="local/1p1d", free_ports=True), cwd=tmp_path)
    decode = spec.launch("decode")
    parts = decode.env["PYTHONPATH"].split(os.pathsep)
    assert parts[0] == str(companions.HOOK_DIR)
    assert str(spec.run_dir / "bundle") in parts
    assert (spec.run_dir / "bundle" / "servekit_decode_guard.py").is_file()
    assert "--middleware" in decode.argv
