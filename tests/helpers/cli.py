"""servekit as a user runs it: a child process of this interpreter, bounded in time."""

from __future__ import annotations

import subprocess
import sys


def servekit_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m servekit ARGS``, its output captured as text; never raises on exit code."""
    return subprocess.run(
        [sys.executable, "-m", "servekit", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
