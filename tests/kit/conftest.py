"""Fixtures for the kit tests: hand-made images and kits built from them."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.gitrepo import git

from servekit.kit.build import BuildResult, build_kit
from servekit.kit.options import KitBuildOptions

from .imagegen import base_layers, source_layers, write_docker_archive, write_oci


@pytest.fixture
def images(tmp_path: Path) -> dict[str, Path]:
    """The same base and source in both formats (OCI gzip, OCI plain, docker-archive)."""
    return {
        "base_oci": write_oci(tmp_path / "base-oci", base_layers(), gzip_layers=True),
        "base_plain": write_oci(tmp_path / "base-plain", base_layers()),
        "base_tar": write_docker_archive(tmp_path / "base.tar", base_layers()),
        "src_oci": write_oci(tmp_path / "src-oci", source_layers(), gzip_layers=True),
        "src_tar": write_docker_archive(tmp_path / "src.tar", source_layers(), tag="test/src:1"),
    }


@pytest.fixture
def kit(images: dict[str, Path], tmp_path: Path) -> BuildResult:
    """A kit built from the source image over its base."""
    req = KitBuildOptions(
        base=str(images["base_oci"]), source=str(images["src_oci"]), out=tmp_path / "k1.tar.zst"
    )
    return build_kit(req)


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    """A git repository with one commit and a fixed commit date."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("a\n")
    (repo / "b.txt").write_text("b\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first")
    return repo
