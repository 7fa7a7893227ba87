"""``servekit layouts import``: names by the rule, writes once, refuses bad input in one line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from tests.helpers.cli import servekit_cli
from tests.helpers.refusal import one_line_error

from servekit.catalog.loader import load, packaged_catalog
from servekit.catalog.options import LayoutsImportOptions
from servekit.errors import UsageError
from servekit.importer.api import import_layout, name_for

CATALOG = packaged_catalog()
FACTS = CATALOG / "a3/glm5.1/1x2p1x4d/source.json"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """``servekit layouts import ARGS``, the child importing this checkout's src/."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    return servekit_cli("layouts", "import", *args, env=env)


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


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(
    processes=st.lists(
        st.fixed_dictionaries(
            {
                "key": st.text(max_size=8),
                "node": st.integers(0, 3),
                "kind": st.sampled_from(["engine", "proxy", "x"]),
            },
            optional={
                "flags": st.lists(st.lists(_JSON, min_size=1, max_size=3), max_size=6),
                "program": _JSON,
                "env": _JSON,
                "cwd": _JSON,
            },
        ),
        max_size=4,
    ),
    nodes=_JSON,
)
def test_hostile_facts_give_a_layout_or_one_line(processes: list[object], nodes: object) -> None:
    """Any JSON shaped roughly like facts: a layout, or UsageError; never another exception."""
    import json as _json
    import tempfile

    doc = {
        "source": {"repo": "r/r", "commit": "0" * 40, "folder": "models/x-a3/1node"},
        "nodes": nodes,
        "processes": processes,
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "facts.json"
        path.write_text(_json.dumps(doc))
        catalog = Path(tmp) / "cat"
        catalog.mkdir()
        try:
            asked = LayoutsImportOptions(
                folder=Path(tmp), name="a3/x/1node", facts=path, catalog=catalog
            )
            import_layout(asked)
        except UsageError as exc:
            assert "\n" not in str(exc)


def test_an_alias_resolves_to_its_layout_and_a_folder_wins_over_it(tmp_path: Path) -> None:
    catalog = tmp_path / "cat"
    catalog.mkdir()
    folder = _folder(tmp_path)
    assert _run(str(folder), "--facts", str(FACTS), "--catalog", str(catalog)).returncode == 0
    (catalog / "aliases.yaml").write_text("a3/1x2p1x4d: a3/glm5.1/1x2p1x4d\n")
    assert load("a3/1x2p1x4d", catalog).layout.name == "a3/glm5.1/1x2p1x4d"
    (catalog / "aliases.yaml").write_text("- not a mapping\n")
    with pytest.raises(UsageError, match="aliases must map"):
        load("a3/1x2p1x4d", catalog)
