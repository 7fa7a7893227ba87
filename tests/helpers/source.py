"""The source repository the fidelity fixtures come from, as a checkout the user names.

``SERVEKIT_SOURCE_CHECKOUT`` names a git checkout of xuopoj/ma-vllm-samples (a
clone, or any git repository holding the pinned commit, bare or not). The
fixtures' folder is read from the pinned commit itself (``git archive``), so a
checkout on another commit still gives the pinned files, and a copy without
that commit is an error, never a silent pass. Unset, the test is skipped with
the one command that makes it run.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

ENV = "SERVEKIT_SOURCE_CHECKOUT"
REPO_URL = "https://github.com/xuopoj/ma-vllm-samples"


class SourceMissing(Exception):
    """The variable is unset: the message says how to get a checkout."""


class SourceUnusable(Exception):
    """The variable names something that is not a checkout with the pinned commit."""


def how_to_get(commit: str) -> str:
    """The one command that fetches the source and runs the re-derivation."""
    return (
        f"git clone {REPO_URL} /tmp/ma-vllm-samples && "
        f"{ENV}=/tmp/ma-vllm-samples .venv/bin/pytest tests/importer/test_source_facts.py "
        f"-k running_the_importer  (the facts' commit is {commit[:12]})"
    )


def source_tree(commit: str, folder: str, into: Path, env: Mapping[str, str]) -> Path:
    """``folder`` of the source at ``commit``, extracted under ``into``."""
    given = env.get(ENV, "").strip()
    if not given:
        raise SourceMissing(f"{ENV} is not set; to re-derive the fixtures: {how_to_get(commit)}")
    git = shutil.which("git")
    if git is None:
        raise SourceUnusable("git is not installed; the source is read with git archive")
    repo = Path(given)
    if not repo.exists():
        raise SourceUnusable(f"{ENV}={given}: no such folder; {how_to_get(commit)}")
    has = subprocess.run(
        [git, "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if has.returncode != 0:
        raise SourceUnusable(
            f"{ENV}={given}: not a git copy of the source holding {commit[:12]} "
            f"(git fetch it there, or: {how_to_get(commit)})"
        )
    archive = subprocess.run(
        [git, "-C", str(repo), "archive", commit, folder], capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise SourceUnusable(f"{ENV}={given}: {commit[:12]} has no folder {folder}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / folder
