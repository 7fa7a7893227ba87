"""Fixtures for the report tests: a private catalog and a simulator-backed runner."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from servekit.catalog.loader import packaged_catalog

from .support import SimRunner


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    """A private copy of the packaged catalog (ledgers land in tmp_path)."""
    root = tmp_path / "catalog"
    shutil.copytree(packaged_catalog(), root, ignore=shutil.ignore_patterns("verification.jsonl"))
    return root


@pytest.fixture
def runner() -> Iterator[SimRunner]:
    r = SimRunner()
    yield r
    r._stack.close()
