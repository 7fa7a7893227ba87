"""Node count detection: run.sh's check wins, then meta.yaml, then the name grammar."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from tests.importer import folders

from servekit.catalog import MAX_NODES
from servekit.importer import ImportRefused, read_meta
from servekit.importer.scan import detect_nodes, double_exports, name_nodes


@pytest.mark.parametrize(
    ("name", "nodes"),
    [
        ("1node", 1),
        ("2nodes", 2),
        ("4nodes", 4),
        ("1p1d", 2),
        ("2p1x2d", 4),
        ("1x2p2d", 4),
        ("1x2p1x4d", 6),
        ("1x4p1x4d", 8),
        ("1p1x2d", 3),
        ("3p1d_2", 4),
        ("dsv41-tp8", None),
    ],
)
def test_the_naming_grammar(name: str, nodes: int | None) -> None:
    assert name_nodes(name) == nodes


def _folder(tmp_path: Path, name: str, run: str, meta: str = "") -> Path:
    files = {"run.sh": run}
    if meta:
        files["meta.yaml"] = meta
    return folders.write(tmp_path / name, files)


CHECK4 = 'if [ "$AISHIPBOX_NNODES" != 4 ]; then exit 1; fi\n'


def test_run_sh_check_wins_and_is_named(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "4nodes", "#!/bin/sh\n" + CHECK4)
    assert detect_nodes(folder, read_meta(folder)) == (4, "run.sh:2 (node-count check)")


def test_a_rank_dispatch_range_counts_as_the_check(tmp_path: Path) -> None:
    run = '#!/bin/sh\ncase x in *) echo "[run] unexpected (want 0..3)" >&2 ;; esac\n'
    folder = _folder(tmp_path, "1x2p2d", run)
    assert detect_nodes(folder, read_meta(folder))[0] == 4


def test_meta_nodes_then_the_name(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "custom", "#!/bin/sh\n", "nodes: 3\n")
    assert detect_nodes(folder, read_meta(folder)) == (3, "meta.yaml (nodes)")
    named = _folder(tmp_path, "2nodes", "#!/bin/sh\n")
    assert detect_nodes(named, read_meta(named))[1] == "folder name '2nodes' (naming grammar)"


@pytest.mark.parametrize(
    ("name", "meta", "given"),
    [("1p1d", "", None), ("custom", "nodes: 2\n", None), ("custom", "", 2)],
)
def test_contradictions_are_one_line(
    tmp_path: Path, name: str, meta: str, given: int | None
) -> None:
    folder = _folder(tmp_path, name, "#!/bin/sh\n" + CHECK4, meta)
    with pytest.raises(ImportRefused, match="node counts disagree") as refused:
        detect_nodes(folder, read_meta(folder), given)
    assert "run.sh:2 (node-count check) says 4" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_no_source_of_a_node_count_is_refused(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "custom", "#!/bin/sh\n")
    with pytest.raises(ImportRefused, match="cannot tell its node count"):
        detect_nodes(folder, read_meta(folder))


def test_a_fifo_in_the_folder_is_refused_not_waited_on(tmp_path: Path) -> None:
    from servekit.importer import extract_folder

    folder = _folder(tmp_path, "1node", "#!/bin/sh\nexec vllm serve /m\n")
    os.mkfifo(folder / "pipe.sh")
    with pytest.raises(ImportRefused, match=r"pipe\.sh is not a regular file"):
        extract_folder(folder)


SCRIPT_TEXT = st.text(
    st.sampled_from(list("AISHIPBOX_NNODES!=-ne\"' 0123456789\n#export LD=x;;fi(want ..)")),
    max_size=400,
)


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(run=SCRIPT_TEXT, name=st.sampled_from(["1node", "2p1x2d", "custom", "4nodes"]))
def test_any_script_text_gives_a_count_or_one_refusal_line(
    tmp_path: Path, run: str, name: str
) -> None:
    folder = _folder(tmp_path, name, run)
    try:
        count, said = detect_nodes(folder, read_meta(folder))
    except ImportRefused as exc:
        assert "\n" not in str(exc)
    else:
        assert 1 <= count <= MAX_NODES
        assert said
    assert all(u.line >= 1 for u in double_exports(folder))
