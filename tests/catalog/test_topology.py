"""One Topology: the naming grammar and its node count, read the same everywhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from servekit.catalog import Topology, name_nodes

SRC = Path(__file__).resolve().parents[2] / "src" / "servekit"


@pytest.mark.parametrize(
    ("name", "nodes", "canonical"),
    [
        ("1node", 1, "1node"),
        ("2nodes", 2, "2nodes"),
        ("12nodes", 12, "12nodes"),
        ("1p1d", 2, "1p1d"),
        ("2p1x2d", 4, "2p1x2d"),
        ("1x2p1x4d", 6, "1x2p1x4d"),
        ("1x4p1x4d", 8, "1x4p1x4d"),
        ("1p1x2d_2", 3, "1p1x2d"),
        ("1x1p1x1d", 2, "1p1d"),
    ],
)
def test_names_of_the_grammar(name: str, nodes: int, canonical: str) -> None:
    topo = Topology.parse(name)
    assert topo is not None
    assert (topo.nodes, topo.name) == (nodes, canonical)
    assert name_nodes(name) == nodes


@pytest.mark.parametrize(
    "name", ["3node", "1nodes", "0nodes", "0p1d", "pd", "my-flat-layout", "1p1d_x", "1p1d_"]
)
def test_other_names_say_no_topology(name: str) -> None:
    """``3node`` is outside the grammar (1node singular, N >= 2 plural): no node count."""
    assert Topology.parse(name) is None
    assert name_nodes(name) is None


def test_a_variant_suffix_can_be_refused() -> None:
    assert Topology.parse("2p2d_2", variant=False) is None


@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9), st.integers(1, 9))
def test_name_and_parse_round_trip(a: int, b: int, c: int, d: int) -> None:
    topo = Topology(a, b, c, d)
    assert Topology.parse(topo.name) == topo
    assert topo.nodes == a * b + c * d


def test_of_spans_names_engines() -> None:
    assert Topology.of_spans({"prefill": [2], "decode": [4]}, 6) == Topology(1, 2, 1, 4)
    assert Topology.of_spans({"mixed": [3]}, 3) == Topology(mixed_nodes=3)
    assert Topology.of_spans({"prefill": [1, 2], "decode": [1]}, 4) is None


def test_no_other_module_reads_the_grammar() -> None:
    """The four interpreters (render rules and views, importer derive and scan) are gone:
    no regex of the grammar outside catalog/topology.py (positive control below)."""
    pattern = re.compile(r"p\(\\d\+\)\(\?:x|nodes\?|1node\|")
    found = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if path.name != "topology.py" and pattern.search(path.read_text())
    ]
    assert found == []
    assert pattern.search(r'PD_NAME = re.compile(r"^(\d+)(?:x(\d+))?p(\d+)(?:x(\d+))?d")')
    assert pattern.search(r'_NODES_NAME = re.compile(r"(\d+)nodes?")')
