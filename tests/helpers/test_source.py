"""SERVEKIT_SOURCE_CHECKOUT: unset says how to get one; a wrong copy fails, never passes."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.gitrepo import git
from tests.helpers.source import (
    ENV,
    SourceMissing,
    SourceUnusable,
    how_to_get,
    source_tree,
)


def _repo(root: Path) -> tuple[Path, str]:
    repo = root / "src"
    (repo / "models" / "m").mkdir(parents=True)
    (repo / "models" / "m" / "run.sh").write_text("echo pinned\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "pinned")
    pinned = git(repo, "rev-parse", "HEAD").strip()
    (repo / "models" / "m" / "run.sh").write_text("echo later\n")
    git(repo, "commit", "-q", "-am", "later")
    return repo, pinned


def test_unset_names_the_one_command(tmp_path: Path) -> None:
    with pytest.raises(SourceMissing, match=ENV) as caught:
        source_tree("64fc020" + "0" * 33, "models/m", tmp_path, {})
    assert "git clone https://github.com/xuopoj/ma-vllm-samples" in str(caught.value)
    assert how_to_get("64fc020" + "0" * 33) in str(caught.value)


def test_the_pinned_commits_files_come_back_whatever_is_checked_out(tmp_path: Path) -> None:
    repo, pinned = _repo(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    tree = source_tree(pinned, "models/m", out, {ENV: str(repo)})
    assert (tree / "run.sh").read_text() == "echo pinned\n"  # not the later work tree


@pytest.mark.parametrize("case", ["missing", "not-git", "no-commit", "no-folder"])
def test_a_copy_that_cannot_give_the_pinned_source_is_an_error(tmp_path: Path, case: str) -> None:
    repo, pinned = _repo(tmp_path)
    given, commit, folder = str(repo), pinned, "models/m"
    if case == "missing":
        given = str(tmp_path / "nowhere")
    elif case == "not-git":
        (tmp_path / "plain").mkdir()
        given = str(tmp_path / "plain")
    elif case == "no-commit":
        commit = "1" * 40
    else:
        folder = "models/absent"
    with pytest.raises(SourceUnusable, match=ENV if case != "no-folder" else "no folder"):
        source_tree(commit, folder, tmp_path, {ENV: given})
