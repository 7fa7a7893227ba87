"""The code baseline stamp ``repo_rev``: short commit + dirty file count.

``7497a06+0dirty`` means the kit was built from commit 7497a06 with no modified
tracked files; anything else is visible at a glance in MANIFEST.json and in the
rebuilt image's label.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from servekit.errors import UsageError
from servekit.kit.models import CodeBaseline


def _git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        raise UsageError(f"--repo {repo}: not a git repository with a commit ({exc})") from exc
    return done.stdout


def code_baseline(repo: Path, engines: dict[str, str]) -> CodeBaseline:
    """Read HEAD and the modified tracked files of ``repo``."""
    commit = _git(repo, "rev-parse", "HEAD").strip()
    short = _git(repo, "rev-parse", "--short=7", "HEAD").strip()
    dirty = sorted(line for line in _git(repo, "diff", "--name-only", "HEAD", "--").splitlines())
    return CodeBaseline(
        repo_rev=f"{short}+{len(dirty)}dirty", commit=commit, dirty_files=dirty, engines=engines
    )


def commit_date(repo: Path) -> str:
    """HEAD's committer date (ISO 8601, UTC): a reproducible 'created' stamp."""
    out = _git(repo, "show", "-s", "--format=%cI", "HEAD")
    return out.strip()
