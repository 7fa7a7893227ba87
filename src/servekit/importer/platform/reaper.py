"""Runs one node's entry and waits for every process it leaves behind.

``python reaper.py SHELL ENTRY [ARGS...]`` marks itself a child subreaper (Linux
``PR_SET_CHILD_SUBREAPER``), so processes the entry starts in the background and
orphans (``sh run_proxy.sh &`` before ``exec``) are re-parented here instead of to
PID 1; it reaps them all and exits with the entry's own status. On SIGTERM it
forwards the signal to its whole process group (the harness starts it in a new
session) and goes on reaping.

Standard library only; it adds nothing to the environment it passes on.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # without it, orphans go to PID 1; the harness still waits for the group


def _forward(signum: int, _frame: object) -> None:
    signal.signal(signum, signal.SIG_IGN)
    os.killpg(0, signum)


def _status(code: int) -> int:
    if os.WIFEXITED(code):
        return os.WEXITSTATUS(code)
    return 128 + os.WTERMSIG(code)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: reaper.py SHELL ENTRY [ARGS...]", file=sys.stderr)
        return 2
    _become_subreaper()
    signal.signal(signal.SIGTERM, _forward)
    entry = subprocess.Popen(argv)
    result = 127
    while True:
        try:
            pid, code = os.wait()
        except ChildProcessError:
            return result
        if pid == entry.pid:
            result = _status(code)
            entry.returncode = result


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
