"""meta.yaml -> provenance facts: the source's claims, bounded reading, one-line refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from servekit.catalog import MAX_NODES
from servekit.importer import ImportRefused, SourceMeta, read_meta
from servekit.importer.meta import NOT_GIVEN

FULL = """\
# provenance
source: https://example.invalid/tutorials/Model.html
derived: 2026-06-27      # re-derived
vllm: 0.21.0             # pinned upstream
vllm_ascend: quay.io/ascend/vllm-ascend:v0.21.0rc1-a3
verified: false          # not on hardware
notes: 'two nodes, DP 2'
"""


def _meta(tmp_path: Path, text: str | bytes) -> SourceMeta:
    path = tmp_path / "meta.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return read_meta(tmp_path)


def test_every_field_is_read_as_the_sources_claim(tmp_path: Path) -> None:
    meta = _meta(tmp_path, FULL)
    assert meta.document() == {
        "file": "meta.yaml",
        "url": "https://example.invalid/tutorials/Model.html",
        "derived": "2026-06-27",
        "vllm": "0.21.0",
        "vllm_ascend": "quay.io/ascend/vllm-ascend:v0.21.0rc1-a3",
        "source_verified": False,
        "notes": "two nodes, DP 2",
    }


@pytest.mark.parametrize(
    "image", ["TODO", "TODO  # no tag upstream", "'todo: set before deploy'", "''", ""]
)
def test_a_todo_or_empty_image_tag_is_not_given(tmp_path: Path, image: str) -> None:
    assert _meta(tmp_path, f"vllm_ascend: {image}\n").vllm_ascend == NOT_GIVEN


def test_no_meta_yaml_is_an_empty_record_that_says_so(tmp_path: Path) -> None:
    meta = read_meta(tmp_path)
    assert meta.file == "meta.yaml (absent)"
    assert (meta.url, meta.source_verified, meta.vllm_ascend) == (None, None, NOT_GIVEN)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("verified: maybe\n", "verified must be true or false"),
        ("- a\n- b\n", "want a mapping"),
        ("source: [unclosed\n", "malformed YAML"),
        ("a: &x [*x]\n", "meta.yaml"),
        ("nodes: 0\n", "nodes must be a whole number"),
    ],
)
def test_bad_meta_is_one_line_naming_the_file(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(ImportRefused) as refused:
        _meta(tmp_path, text)
    assert words in str(refused.value)
    assert "meta.yaml" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_yaml_bomb_is_refused_in_bounded_work(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 12)]
    with pytest.raises(ImportRefused):
        _meta(tmp_path, "\n".join(lines) + "\n")
    with pytest.raises(ImportRefused, match="larger than"):
        _meta(tmp_path, "notes: '" + "x" * (2 << 20) + "'\n")


def test_nodes_in_meta_is_read(tmp_path: Path) -> None:
    assert _meta(tmp_path, "nodes: 6\n").nodes == 6


def test_meta_takes_every_node_count_a_layout_may_have(tmp_path: Path) -> None:
    """One bound (issue 46): the catalog's MAX_NODES, not a lower one of the importer's."""
    assert _meta(tmp_path, f"nodes: {MAX_NODES}\n").nodes == MAX_NODES
    with pytest.raises(ImportRefused, match=f"1..{MAX_NODES}"):
        _meta(tmp_path, f"nodes: {MAX_NODES + 1}\n")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_bytes_give_facts_or_one_refusal_line(tmp_path: Path, data: bytes) -> None:
    try:
        meta = _meta(tmp_path, data)
    except ImportRefused as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(meta.document(), dict)
