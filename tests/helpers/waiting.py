"""Waiting on a condition with a generous deadline, never on a fixed sleep.

A busy machine (CI beside other jobs, a laptop) may take many times longer than an
idle one to reach a state; a test waits for the state itself, and the deadline
only turns "never" into a failure that says what was not seen.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

DEADLINE_S = 120.0


def wait_until(
    condition: Callable[[], bool], what: str, deadline_s: float = DEADLINE_S, poll_s: float = 0.05
) -> None:
    """Return once ``condition()`` is true; fail naming ``what`` after ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"never saw {what} within {deadline_s:.0f} s"
        time.sleep(poll_s)


def wait_for_text(path: Path, text: str, deadline_s: float = DEADLINE_S) -> None:
    """Return once ``text`` is in the file at ``path`` (a process's output as it writes it)."""

    def seen() -> bool:
        try:
            return text in path.read_text(errors="replace")
        except FileNotFoundError:
            return False

    wait_until(seen, f"{text!r} in {path}", deadline_s)


def healthy(url: str) -> bool:
    """Whether ``url``/health answers 200 now (an engine's or the proxy's own readiness)."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=30) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False
