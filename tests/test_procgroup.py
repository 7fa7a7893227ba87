"""Detached process groups (issue 46): started apart, stopped whole, stubborn ones killed."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from servekit.procgroup import group_alive, signal_group, start_detached, stop_groups

# A shell that starts a child in its group and waits; ``stubborn`` ignores SIGTERM
# (and so does its child: an ignored signal stays ignored across exec).
TREE = {"plain": "sleep 60 & echo $!; wait", "stubborn": "trap '' TERM; sleep 60 & echo $!; wait"}


def _tree(tmp_path: Path, kind: str) -> tuple[subprocess.Popen[bytes], int]:
    out = tmp_path / f"{kind}.out"
    with out.open("wb") as log:
        popen = start_detached(["sh", "-c", TREE[kind]], stdout=log)
    for _ in range(400):
        text = out.read_text().strip()
        if text:
            # reaped as it dies, as its parent does in use (a zombie still counts in its group)
            threading.Thread(target=popen.wait, daemon=True).start()
            return popen, int(text)
        time.sleep(0.05)
    raise AssertionError(f"{kind} tree did not start")


@pytest.mark.slow  # about 2 s here: the orphaned child is reaped by PID 1 in its own time
def test_a_detached_process_leads_its_own_group_and_stopping_it_stops_its_children(
    tmp_path: Path,
) -> None:
    popen, child = _tree(tmp_path, "plain")
    leader = popen.pid
    assert os.getpgid(leader) == leader != os.getpgrp()  # its own group, not ours
    assert os.getpgid(child) == leader
    assert stop_groups([leader], grace_s=5.0) == set()
    assert not group_alive(leader)
    assert popen.wait(5) == -signal.SIGTERM


@pytest.mark.slow  # about 2 s here, as above
def test_a_group_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    popen, _ = _tree(tmp_path, "stubborn")
    leader = popen.pid
    signal_group(leader, signal.SIGTERM)  # the control: SIGTERM alone leaves it running
    time.sleep(0.2)
    assert group_alive(leader) and popen.returncode is None
    assert stop_groups([leader], grace_s=0.2) == set()
    assert not group_alive(leader)
    assert popen.wait(5) == -signal.SIGKILL


def test_a_gone_group_is_nothing_to_signal_or_stop() -> None:
    signal_group(2**22 + 12345, signal.SIGTERM)  # no such group: no error
    assert stop_groups([2**22 + 12345], grace_s=0.1) == set()
