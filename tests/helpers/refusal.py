"""The one assertion for refused input: exit 2, one line on stderr, ``error: ...``, no traceback."""

from __future__ import annotations

import subprocess


def one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The error line, after checking it is the only one and names every needle."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]
