"""The code baseline stamp ``repo_rev``: short commit + dirty file count.

``7497a06+0dirty`` means the kit was built from commit 7497a06 with no modified
tracked files; anything else is visible at a glance in MANIFEST.json and in the
rebuilt image's label.
"""

from __future__ import annotations

from pathlib import Path

from servekit.kit.gitrepo import git
from servekit.kit.models import CodeBaseline

REPO_REV_LABEL = "servekit.repo_rev"


def code_baseline(repo: Path, engines: dict[str, str]) -> CodeBaseline:
    """Read HEAD and the modified tracked files of ``repo``."""
    commit, dirty = checkout(repo)
    short = git(repo, "rev-parse", "--short=7", "HEAD").strip()
    return CodeBaseline(
        repo_rev=f"{short}+{len(dirty)}dirty", commit=commit, dirty_files=dirty, engines=engines
    )


def commit_date(repo: Path) -> str:
    """HEAD's committer date (ISO 8601, UTC): a reproducible 'created' stamp."""
    return git(repo, "show", "-s", "--format=%cI", "HEAD").strip()


def checkout(repo: Path) -> tuple[str, list[str]]:
    """The checked-out commit and its modified tracked files."""
    commit = git(repo, "rev-parse", "HEAD").strip()
    dirty = sorted(git(repo, "diff", "--name-only", "HEAD", "--").splitlines())
    return commit, dirty


def baseline_matches(code: CodeBaseline, baseline: str) -> bool:
    """Whether the stamp is the release baseline.

    ``baseline`` is a full stamp (``7497a06+0dirty``: equal strings) or a
    commit (7 to 40 hex digits: the stamp's commit starts with it and the
    tree was clean).
    """
    if "+" in baseline:
        return code.repo_rev == baseline
    is_commit = 7 <= len(baseline) <= 40 and all(c in "0123456789abcdef" for c in baseline)
    return is_commit and code.commit.startswith(baseline) and not code.dirty_files
