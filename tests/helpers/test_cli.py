"""The shared CLI runner and the environments it is given: what every CLI test relies on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.cli import (
    own_homes,
    runs_env,
    servekit_argv,
    servekit_cli,
    servekit_inproc,
    wide_env,
)
from tests.helpers.files import sparse_file


def test_the_argv_is_this_interpreter_running_the_package() -> None:
    assert servekit_argv("layouts", "list") == [sys.executable, "-m", "servekit", "layouts", "list"]


def test_a_refused_command_comes_back_as_a_result_and_check_raises_instead(
    tmp_path: Path,
) -> None:
    done = servekit_cli("frobnicate", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    with pytest.raises(subprocess.CalledProcessError, match="returned non-zero exit status 2"):
        servekit_cli("frobnicate", cwd=tmp_path, check=True)


def test_in_process_runs_give_the_same_shape() -> None:
    done = servekit_inproc("--help")
    assert done.returncode == 0 and "layouts" in done.stdout
    assert servekit_inproc("frobnicate").returncode == 2


def test_the_environments_keep_runs_and_homes_in_the_tests_folder(tmp_path: Path) -> None:
    assert wide_env(NO_COLOR="1")["COLUMNS"] == "200"
    assert wide_env(NO_COLOR="1")["NO_COLOR"] == "1"
    assert wide_env()["PATH"] == os.environ["PATH"]
    env = runs_env(tmp_path, {"PATH": "/usr/bin:/bin"})
    assert env == {
        "PATH": "/usr/bin:/bin",
        "SERVEKIT_RUNS": str(tmp_path / "runs"),
        "COLUMNS": "200",
    }
    homes = own_homes(tmp_path)
    assert sorted(homes) == ["SERVEKIT_RUNS", "XDG_DATA_HOME", "XDG_STATE_HOME"]
    assert all(Path(v).parent == tmp_path for v in homes.values())


def test_a_sparse_file_has_its_size_and_head(tmp_path: Path) -> None:
    path = sparse_file(tmp_path / "f", size=1 << 20, head=b"ab\n")
    assert path.stat().st_size == 1 << 20
    assert path.read_bytes()[:4] == b"ab\n\0"
