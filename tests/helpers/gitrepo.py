"""git with a fixed identity and date, so repositories made in tests have stable commits."""

from __future__ import annotations

import subprocess
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_DATE": "2026-10-05T12:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-10-05T12:00:00+00:00",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "PATH": "/usr/bin:/bin",
}


def git(repo: Path, *args: str) -> str:
    """Run ``git -C repo ARGS``; its stdout (a failure raises)."""
    done = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, env=GIT_ENV, capture_output=True, text=True
    )
    return done.stdout
