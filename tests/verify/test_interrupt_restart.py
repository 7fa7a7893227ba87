"""Ctrl-C while ``verify`` restarts a PD layout and its reference at the benchmark speed.

With ``--speed`` other than the benchmark speed, verify stops the simulated
deployment after acceptance and starts it again; a PD layout's reference
(``local/1p1d`` -> ``local/single``) goes down and comes up with it. An
interrupt in that stretch used to orphan the reference (its supervisor and
engine stayed up, and the next verify was refused "already running"). The
hooks are the runs' own state files: the PD run recorded ``stopped`` (the
restart's stop has begun), or the reference recorded a new supervisor (its
restart has begun); then SIGINT, then nothing of the run may be left, and a
second verify must start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.helpers.cli import own_homes, servekit_argv, wide_env
from tests.verify.test_interrupt import nothing_left

LAYOUT, REFERENCE = "local/1p1d", "local/single"


def start_verify(tmp_path: Path, out: Path) -> tuple[subprocess.Popen[str], dict[str, str]]:
    env = wide_env(**own_homes(tmp_path))
    cmd = servekit_argv("verify", LAYOUT, "--engine", "sim", "--quick")
    cmd += ["--speed", "4", "--bench-speed", "1", "--out", str(out), "--no-baseline"]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    return proc, env


def state(tmp_path: Path, layout: str) -> dict[str, object] | None:
    path = tmp_path / "runs" / layout.replace("/", "__") / "state.json"
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def wait_until(proc: subprocess.Popen[str], what: str, test: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 300
    while not test():
        if proc.poll() is not None:
            pytest.fail(f"verify ended before {what}: {proc.communicate()}")
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.02)


def processes_under(root: Path) -> list[str]:
    """Live processes whose command line names a path under ``root`` (the test's runs)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            status = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError, UnicodeDecodeError):
            continue
        if str(root) in cmdline and status != "Z":
            found.append(f"{entry}: {cmdline[:200]}")
    return found


def restart_stopping(tmp_path: Path, proc: subprocess.Popen[str], out: Path) -> None:
    """The restart's stop has begun: acceptance is done and the PD run recorded stopped."""
    wait_until(proc, "acceptance finish", (out / "accept" / "result.json").is_file)
    wait_until(
        proc, "the PD run stopped for the restart",
        lambda: (state(tmp_path, LAYOUT) or {}).get("phase") == "stopped",
    )  # fmt: skip


def reference_restarting(tmp_path: Path, proc: subprocess.Popen[str], out: Path) -> None:
    """The reference's restart has begun: its state names a supervisor other than the first."""
    wait_until(proc, "the reference up", lambda: state(tmp_path, REFERENCE) is not None)
    first = (state(tmp_path, REFERENCE) or {}).get("supervisor_pid")
    wait_until(
        proc, "the reference restarted",
        lambda: (state(tmp_path, REFERENCE) or {}).get("supervisor_pid") not in (None, first),
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("hook", [restart_stopping, reference_restarting])
def test_ctrl_c_while_restarting_for_the_benchmarks_leaves_nothing(
    tmp_path: Path, hook: Callable[[Path, subprocess.Popen[str], Path], None]
) -> None:
    out = tmp_path / "run"
    proc, env = start_verify(tmp_path, out)
    hook(tmp_path, proc, out)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 130, stdout[-2000:] + stderr[-2000:]
    run = json.loads((out / "run.json").read_text())
    assert run["interrupted"]["signal"] == "SIGINT"
    nothing_left(env)
    for layout in (LAYOUT, REFERENCE):
        recorded = state(tmp_path, layout)
        assert recorded is not None and recorded["phase"] == "stopped", (layout, recorded)
    assert processes_under(tmp_path) == []

    again, _ = start_verify(tmp_path, tmp_path / "run2")
    try:
        wait_until(
            again, "the second verify's deployment ready",
            lambda: (state(tmp_path, REFERENCE) or {}).get("phase") == "ready",
        )  # fmt: skip
    finally:
        again.send_signal(signal.SIGINT)
        again.communicate(timeout=180)
    assert "already running" not in (tmp_path / "run2" / "run.json").read_text()
    nothing_left(env)
    assert processes_under(tmp_path) == []
