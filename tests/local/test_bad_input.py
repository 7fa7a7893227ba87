"""Bad input to ``servekit up``: one line, exit 2, nothing started, nothing recorded."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.cli import runs_env, servekit_cli, servekit_inproc
from tests.helpers.parallel import serial
from tests.helpers.refusal import one_line_error

from servekit.errors import UsageError
from servekit.local import preflight
from servekit.local.tinymodel import build_tiny_model

MODEL = Path(".servekit/models/tiny")


def assert_nothing_started(cwd: Path) -> None:
    runs = cwd / "runs"
    assert not list(runs.glob("*/state.json")), "a refused up must not start a supervisor"
    assert not list(runs.glob("*/logs/*.log"))


def test_unknown_layout(tmp_path: Path) -> None:
    result = servekit_inproc("up", "local/nope", cwd=tmp_path, env=runs_env(tmp_path))
    one_line_error(result, "unknown layout 'local/nope'", "local/1p1d")
    assert_nothing_started(tmp_path)


def test_layout_for_missing_hardware_offers_the_simulator(tmp_path: Path) -> None:
    result = servekit_inproc("up", "a3/1p1d", cwd=tmp_path, env=runs_env(tmp_path))
    one_line_error(result, "needs ascend-a3 hardware", "--engine sim")
    assert_nothing_started(tmp_path)


@pytest.mark.slow
def test_missing_model_directory_says_how_to_build_it(
    tmp_path: Path,
    layout_data: Callable[[str], dict[str, Any]],
    write_catalog: Callable[[dict[str, Any]], Path],
) -> None:
    pytest.importorskip("vllm", reason="the model check follows the engine check")
    data = layout_data("local/single")
    data["model"]["path"] = "models/mine"  # not the tiny model: never built on demand
    catalog = write_catalog(data)
    result = servekit_inproc(
        "up", "local/single", "--catalog", str(catalog), cwd=tmp_path, env=runs_env(tmp_path)
    )
    one_line_error(result, "model directory", "is missing", "servekit model tiny --out")
    assert_nothing_started(tmp_path)
    assert not (tmp_path / "models").exists()


@serial  # holds port 8100, which local/single's up without --free-ports binds
def test_port_in_use_names_the_port_and_the_process(tmp_path: Path) -> None:
    pytest.importorskip("vllm", reason="the port check follows the engine check")
    build_tiny_model(tmp_path / MODEL)
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with contextlib.suppress(OSError):  # held elsewhere already: same refusal
            holder.bind(("127.0.0.1", 8100))
        holder.listen()
        result = servekit_inproc("up", "local/single", cwd=tmp_path, env=runs_env(tmp_path))
    one_line_error(result, "port 8100 (engine) is already in use", "--free-ports")
    assert_nothing_started(tmp_path)


def test_unknown_engine(tmp_path: Path) -> None:
    result = servekit_inproc(
        "up", "local/single", "--engine", "tgi", cwd=tmp_path, env=runs_env(tmp_path)
    )
    one_line_error(result, "--engine tgi", "vllm", "sim")


def test_engine_not_installed_names_the_extra() -> None:
    with pytest.raises(UsageError) as err:
        preflight.check_engine_installed("servekit_no_such_engine")
    assert "pip install 'servekit[local]'" in str(err.value)


def test_model_path_that_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "model"
    path.write_text("not a folder")
    with pytest.raises(UsageError, match="is not a folder"):
        preflight.check_model_dir(path)


def test_model_directory_without_config(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"has no config\.json"):
        preflight.check_model_dir(tmp_path)


@pytest.mark.vllm  # the tiny model's tokenizer is trained with `tokenizers` (servekit[local])
@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any folder; permissions cannot bite")
def test_unreadable_model_directory(tmp_path: Path) -> None:
    build_tiny_model(tmp_path / "m")
    (tmp_path / "m").chmod(0)
    try:
        with pytest.raises(UsageError, match="is unreadable"):
            preflight.check_model_dir(tmp_path / "m")
    finally:
        (tmp_path / "m").chmod(0o755)


def test_engine_missing_from_the_interpreter_is_refused_by_the_cli(tmp_path: Path) -> None:
    # A Python whose path hides vllm: a sitecustomize that blocks the import.
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import importlib.abc, sys\n"
        "class _Hide(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'vllm' or name.startswith('vllm.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, _Hide())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(shim), "SERVEKIT_RUNS": str(tmp_path / "runs")}
    result = servekit_cli("up", "local/single", cwd=tmp_path, env=env, timeout=None)
    one_line_error(result, "vLLM engine is not installed", "servekit[local]")
    assert_nothing_started(tmp_path)


def test_already_running_is_refused(tmp_path: Path) -> None:
    from servekit.local.state import RunState, write_state

    state_path = tmp_path / "state.json"
    write_state(state_path, RunState(layout="local/single", engine="vllm", started_at=0.0))
    with pytest.raises(UsageError, match="already running"):
        preflight.check_not_running(state_path, "local/single")


def test_leftovers_of_a_crashed_run_are_refused(tmp_path: Path) -> None:
    from servekit.local.state import ProcState, RunState, start_ticks, write_state

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        state = RunState(
            layout="local/single",
            engine="vllm",
            supervisor_pid=2**22 + 7,  # no such process: the supervisor died
            started_at=0.0,
            phase="ready",
            processes=[
                ProcState(
                    name="engine",
                    role="mixed",
                    kind="engine",
                    pid=sleeper.pid,
                    pid_start=start_ticks(sleeper.pid),  # the process recorded at spawn
                    log=tmp_path,
                )
            ],
        )
        write_state(tmp_path / "state.json", state)
        with pytest.raises(UsageError, match=f"still alive \\(pids \\[{sleeper.pid}\\]\\)"):
            preflight.check_not_running(tmp_path / "state.json", "local/single")
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf", "1e400", "-inf"])
def test_ready_timeout_must_be_positive_seconds(tmp_path: Path, value: str) -> None:
    result = servekit_inproc(
        "up",
        "local/single",
        "--engine",
        "sim",
        "--ready-timeout",
        value,
        cwd=tmp_path,
        env=runs_env(tmp_path),
    )
    one_line_error(result, "--ready-timeout", "positive number of seconds")
    assert_nothing_started(tmp_path)


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_demo_ready_timeout_must_be_positive_seconds(tmp_path: Path, value: str) -> None:
    result = servekit_inproc("demo", "--ready-timeout", value, cwd=tmp_path, env=runs_env(tmp_path))
    one_line_error(result, "--ready-timeout", "positive number of seconds")
    assert not (tmp_path / ".servekit").exists()
    assert_nothing_started(tmp_path)


def test_logs_refuses_a_negative_line_count(tmp_path: Path) -> None:
    one_line_error(
        servekit_inproc("logs", "proxy", "-n", "-5", cwd=tmp_path, env=runs_env(tmp_path)),
        "--lines -5",
    )


@pytest.mark.parametrize("name", ["../../etc/passwd", "", "a/b"])
def test_logs_refuses_what_is_not_a_process_name(tmp_path: Path, name: str) -> None:
    one_line_error(
        servekit_inproc("logs", name, cwd=tmp_path, env=runs_env(tmp_path)), "not a process name"
    )


@pytest.mark.parametrize("name", ["..", "local/..", "../../x", "", "a3/m/..", "a3/m/t/x"])
def test_down_refuses_what_is_not_a_layout_name(tmp_path: Path, name: str) -> None:
    one_line_error(
        servekit_inproc("down", name, cwd=tmp_path, env=runs_env(tmp_path)), "not a layout name"
    )


def test_model_tiny_never_replaces_a_file(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep me")
    result = servekit_inproc(
        "model", "tiny", "--out", str(target), cwd=tmp_path, env=runs_env(tmp_path)
    )
    one_line_error(result, "exists and is not a folder")
    assert target.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious"]


def test_model_tiny_never_replaces_a_folder_of_other_files(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    result = servekit_inproc(
        "model", "tiny", "--out", str(folder), cwd=tmp_path, env=runs_env(tmp_path)
    )
    one_line_error(result, "not a tiny-model build", "servekit-tiny.json")
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


def test_model_tiny_never_replaces_a_link(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    one_line_error(
        servekit_inproc("model", "tiny", "--out", "link", cwd=tmp_path, env=runs_env(tmp_path)),
        "is not a folder",
    )
    assert (tmp_path / "link").is_symlink()


@pytest.mark.parametrize("out", [".", "..", ""])
def test_model_tiny_refuses_the_current_folder_and_above(tmp_path: Path, out: str) -> None:
    here = tmp_path / "project"
    here.mkdir()
    (here / "keep.txt").write_text("keep me")
    result = servekit_inproc("model", "tiny", "--out", out, cwd=here, env=runs_env(here))
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: --out")
    assert (here / "keep.txt").read_text() == "keep me"


def test_model_tiny_out_check_refuses_the_root() -> None:
    from servekit.local.tinymodel.ondemand import check_out

    with pytest.raises(UsageError, match="holds the current folder"):
        check_out(Path("/"))


@pytest.mark.vllm  # the tiny model's tokenizer is trained with `tokenizers` (servekit[local])
def test_model_tiny_out_check_allows_a_rebuild(tmp_path: Path) -> None:
    from servekit.local.tinymodel.ondemand import check_out

    build_tiny_model(tmp_path / "m")
    assert check_out(tmp_path / "m") == tmp_path / "m"
    result = servekit_inproc("model", "tiny", "--out", "m", cwd=tmp_path, env=runs_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "m" / "servekit-tiny.json").is_file()
