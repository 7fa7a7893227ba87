"""Process groups: logs, death detection, teardown with no survivors."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from tests.local.conftest import alive

from servekit.local import procs
from servekit.local.supervisor import death_report

SLEEP = "import time; time.sleep(600)"


def _wait_exit(child: procs.Child) -> int:
    deadline = time.monotonic() + 30
    while child.exit_code() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    code = child.exit_code()
    assert code is not None
    return code


def test_output_goes_to_the_log(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "p.log"
    child = procs.spawn("p", [sys.executable, "-c", "print('hello'); print('world')"], {}, log)
    assert _wait_exit(child) == 0
    assert procs.tail(log, 1) == ["world"]


def test_death_report_names_process_code_and_last_lines(tmp_path: Path) -> None:
    code = "import sys\nfor i in range(30): print('line', i)\nsys.exit(3)"
    child = procs.spawn("decode", [sys.executable, "-c", code], {}, tmp_path / "d.log")
    _wait_exit(child)
    assert procs.first_dead([child]) is child
    report = death_report(child, lines=5)
    assert report.startswith("process decode exited with code 3")
    assert "line 29" in report
    assert "line 24" not in report


def test_killed_by_signal_is_named(tmp_path: Path) -> None:
    child = procs.spawn("p", [sys.executable, "-c", SLEEP], {}, tmp_path / "p.log")
    os.kill(child.pid, signal.SIGKILL)
    _wait_exit(child)
    assert "code -9 (killed by SIGKILL)" in death_report(child)


def test_each_child_gets_its_own_process_group(tmp_path: Path) -> None:
    child = procs.spawn("p", [sys.executable, "-c", SLEEP], {}, tmp_path / "p.log")
    try:
        assert os.getpgid(child.pid) == child.pid
        assert os.getpgid(child.pid) != os.getpgid(0)
    finally:
        procs.stop_children([child], grace_s=5)


def _pids_from(log: Path, count: int) -> set[int]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lines = procs.tail(log, 10)
        if len(lines) >= count:
            return {int(x) for x in lines[:count]}
        time.sleep(0.05)
    raise AssertionError(f"{log} never listed {count} pids")


def test_teardown_reaches_grandchildren_even_outside_the_group(tmp_path: Path) -> None:
    # The child starts one grandchild in its group and one in a new session
    # (escaping group signals), prints their pids, then sleeps.
    code = (
        "import subprocess, sys\n"
        "a = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "b = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
        " start_new_session=True)\n"
        "print(a.pid, flush=True); print(b.pid, flush=True)\n"
        "import time; time.sleep(600)\n"
    )
    log = tmp_path / "tree.log"
    child = procs.spawn("tree", [sys.executable, "-c", code], {}, log)
    grandchildren = _pids_from(log, 2)
    everyone = {child.pid, *grandchildren}
    assert alive(everyone) == everyone
    assert procs.stop_children([child], grace_s=5) == set()
    assert alive(everyone) == set()


def test_sigterm_ignored_escalates_to_sigkill(tmp_path: Path) -> None:
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    log = tmp_path / "stubborn.log"
    child = procs.spawn("stubborn", [sys.executable, "-c", code], {}, log)
    while procs.tail(log, 1) != ["ready"]:
        time.sleep(0.05)
    assert procs.stop_children([child], grace_s=0.5) == set()
    assert child.exit_code() == -signal.SIGKILL
