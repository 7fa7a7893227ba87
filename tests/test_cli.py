"""Every documented command exists, answers --help, and the root maps usage errors to exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

DOCUMENTED = [
    ["layouts", "list"],
    ["layouts", "show"],
    ["layouts", "check"],
    ["render"],
    ["defaults"],
    ["model", "tiny"],
    ["up"],
    ["down"],
    ["status"],
    ["logs"],
    ["demo"],
    ["proxy"],
    ["sim"],
    ["accept"],
    ["bench"],
    ["kit", "build"],
    ["kit", "verify"],
    ["kit", "rebuild"],
    ["kit", "inspect"],
    ["verify"],
    ["catalog", "site"],
]


def servekit(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "servekit", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


@pytest.mark.parametrize("command", DOCUMENTED, ids=[" ".join(c) for c in DOCUMENTED])
def test_documented_command_answers_help(command: list[str]) -> None:
    result = servekit(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage" in result.stdout or "usage" in result.stdout


def test_root_help_lists_every_group() -> None:
    out = servekit("--help").stdout
    for group in {c[0] for c in DOCUMENTED}:
        assert group in out


def test_unknown_command_is_a_usage_error() -> None:
    result = servekit("frobnicate")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_strict_check_fails_on_the_catalogs_warnings_and_plain_check_passes() -> None:
    assert servekit("layouts", "check").returncode == 0
    strict = servekit("layouts", "check", "--strict")
    assert strict.returncode == 1
    assert "a3/2p1x2d" in strict.stdout and "AscendDirectTransport" in strict.stdout
