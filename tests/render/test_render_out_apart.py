"""``render --out`` may never replace, hold or sit inside the catalog it reads.

``--out CAT --catalog CAT --force`` used to replace the catalog with the
rendering (every layout gone), and ``--out`` inside the packaged catalog was
accepted without ``--force``. Each shape is one line, exit 2, nothing changed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from tests.helpers.cli import servekit_cli
from tests.helpers.refusal import one_line_error

from servekit.catalog.loader import layout_names, packaged_catalog


def render(*args: str) -> subprocess.CompletedProcess[str]:
    """``servekit render local/single --target nodes ARGS``: the one layout these tests move."""
    return servekit_cli("render", "local/single", "--target", "nodes", *args)


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    root = tmp_path / "cat"
    shutil.copytree(packaged_catalog() / "local", root / "local")
    return root


@pytest.mark.parametrize(
    ("out", "needle", "force"),
    [
        (".", "is the catalog it reads", True),
        (".", "is the catalog it reads", False),
        ("..", "holds the catalog it reads", True),
        ("local", "is inside the catalog", True),
        ("local/single", "is inside the catalog", False),
        ("local/new-folder", "is inside the catalog", False),
    ],
)
def test_out_overlapping_the_catalog_is_refused_and_nothing_changes(
    catalog: Path, out: str, needle: str, force: bool
) -> None:
    before = sorted(p.relative_to(catalog) for p in catalog.rglob("*"))
    target = catalog / out
    result = render("--out", str(target), "--catalog", str(catalog), *(["--force"] * force))
    one_line_error(result, "--out", needle)
    assert sorted(p.relative_to(catalog) for p in catalog.rglob("*")) == before
    assert "local/single" in layout_names(catalog)


def test_out_inside_the_packaged_catalog_is_refused_without_force(tmp_path: Path) -> None:
    target = packaged_catalog() / "local" / "rendered-here"
    assert not target.exists()
    one_line_error(render("--out", str(target)), "--out", "inside the catalog")
    assert not target.exists()
    custom = tmp_path / "cat"
    shutil.copytree(packaged_catalog() / "local", custom / "local")
    result = render("--out", str(target), "--catalog", str(custom))
    one_line_error(result, "--out", "inside the packaged catalog")
    assert not target.exists()


def test_out_beside_the_catalog_renders(catalog: Path, tmp_path: Path) -> None:
    """Positive control: the same command with --out outside the catalog writes it."""
    result = render("--out", str(tmp_path / "out"), "--catalog", str(catalog), "--force")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "node0").is_dir() or any((tmp_path / "out").iterdir())
