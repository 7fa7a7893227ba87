"""``servekit layouts import``: names by the rule, writes once, refuses bad input in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.refusal import one_line_error

from servekit.catalog.loader import load, packaged_catalog
from servekit.errors import UsageError
from servekit.importer.api import name_for

CATALOG = packaged_catalog()
FACTS = CATALOG / "a3/glm5.1/1x2p1x4d/source.json"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    return subprocess.run(
        [sys.executable, "-m", "servekit", "layouts", "import", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )


def _folder(tmp_path: Path, parent: str = "glm5.1-a3", topology: str = "1x2p1x4d") -> Path:
    folder = tmp_path / "models" / parent / topology
    folder.mkdir(parents=True)
    (folder / "run.sh").write_text("#!/bin/sh\nexit 0\n")
    return folder


def test_the_name_follows_the_rule(tmp_path: Path) -> None:
    assert name_for(_folder(tmp_path)) == "a3/glm5.1/1x2p1x4d"
    assert name_for(_folder(tmp_path, "qwen3.5-397b-a17b-a2", "2nodes")) == (
        "a2/qwen3.5-397b-a17b/2nodes"
    )
    with pytest.raises(UsageError, match="--name"):
        name_for(_folder(tmp_path, "no-hardware", "1node"))


def test_import_writes_layout_profile_and_facts_once(tmp_path: Path) -> None:
    catalog = tmp_path / "cat"
    catalog.mkdir()
    folder = _folder(tmp_path)
    first = _run(str(folder), "--facts", str(FACTS), "--catalog", str(catalog))
    assert first.returncode == 0, first.stderr
    assert "3 file(s) changed, 0 not expressed" in first.stdout
    again = _run(str(folder), "--facts", str(FACTS), "--catalog", str(catalog))
    assert "0 file(s) changed" in again.stdout
    for rel in ("layout.yaml", "source.json"):
        assert (catalog / "a3/glm5.1/1x2p1x4d" / rel).read_bytes() == (
            CATALOG / "a3/glm5.1/1x2p1x4d" / rel
        ).read_bytes()
    assert load("a3/glm5.1/1x2p1x4d", catalog).layout.nodes == 6


def test_bad_input_is_one_line_and_nothing_written(tmp_path: Path) -> None:
    catalog = tmp_path / "cat"
    catalog.mkdir()
    folder = _folder(tmp_path)
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    one_line_error(_run(str(folder), "--facts", str(junk), "--catalog", str(catalog)), "not JSON")
    one_line_error(
        _run(str(folder), "--facts", str(FACTS), "--name", "a3/x", "--catalog", str(catalog)),
        "--name",
    )
    (tmp_path / "list.json").write_text("[]")
    one_line_error(
        _run(str(folder), "--facts", str(tmp_path / "list.json"), "--catalog", str(catalog)),
        "processes",
    )
    assert list(catalog.iterdir()) == []
