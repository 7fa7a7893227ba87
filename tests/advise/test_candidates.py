"""Candidates: the family's layouts as their Plans run them, and derivations 'layouts new' makes."""

from __future__ import annotations

import pytest

from servekit.advise import Candidate, confirm, find_candidates
from servekit.errors import UsageError

FAMILY = "a3/deepseekv4-flash"
ALL = None  # every shape wanted


@pytest.fixture(scope="module")
def found() -> dict[str, Candidate]:
    return {c.name + "|" + c.origin: c for c in find_candidates(FAMILY, 4, 16, wanted=ALL)}


def catalog(found: dict[str, Candidate], topo: str) -> Candidate:
    return found[f"{FAMILY}/{topo}|catalog"]


@pytest.mark.slow
def test_catalog_layouts_are_read_from_their_plans(found: dict[str, Candidate]) -> None:
    assert catalog(found, "1p1d").describe() == "P 4 x prefill:tp4:dp1 / D 16 x decode:tp1:dp1"
    assert catalog(found, "3p1d").describe() == "P 12 x prefill:tp4:dp1 / D 16 x decode:tp1:dp1"
    # built-in DP: one API server in front of all the ranks, spanning two nodes for decode
    assert catalog(found, "2p1x2d").describe() == "P 2 x prefill:tp1:dp16 / D 1 x decode:tp1:dp32"
    assert catalog(found, "1node").describe() == "M 1 x mixed:tp4:dp4"
    assert not catalog(found, "1p1d").prefix_caching  # its verified command turns it off
    assert catalog(found, "1node").prefix_caching
    assert {c.nodes for c in found.values()} <= {1, 2, 3, 4}


@pytest.mark.slow
def test_derived_endpoints_are_what_layouts_new_derives(found: dict[str, Candidate]) -> None:
    derived = [c for c in found.values() if c.derive is not None]
    names = {c.name.rsplit("/", 1)[1] for c in derived}
    assert {"1p2d", "2p1d"} <= names
    # nothing derived twice, nothing that is already a catalog layout
    sigs = [c.signature for c in found.values()]
    assert len(sigs) == len(set(sigs))
    picks = [c for c in derived if c.name.endswith(("/1p2d", "/2p1d"))][:2]
    picks += [c for c in derived if "prefill.tp=8" in c.derive.set][:1]  # type: ignore[union-attr]
    for cand in picks:
        real = confirm(cand)
        assert real is not None and real.signature == cand.signature, cand.describe()


@pytest.mark.slow
def test_a_split_no_calibration_covers_is_never_derived() -> None:
    wanted = {"prefill:tp4:dp1", "decode:tp1:dp1"}
    got = find_candidates(FAMILY, 3, 16, wanted=wanted)
    derived = [c for c in got if c.derive is not None]
    assert derived and all(p.shape.key in wanted for c in derived for p in c.pools)
    assert all(c.nodes <= 3 for c in got)


def test_an_unknown_family_says_how_to_find_one() -> None:
    with pytest.raises(UsageError, match=r"--family a9/nothing: no layout .* layouts list"):
        find_candidates("a9/nothing", 4, 16)


def test_local_layouts_are_candidates_as_they_are() -> None:
    got = {c.name: c for c in find_candidates("local", 1, None)}
    assert got["local/single"].describe() == "M 1 x mixed:tp1:dp1"
    assert got["local/dp2"].describe() == "M 2 x mixed:tp1:dp1"
    assert got["local/1p1d"].describe() == "P 1 x prefill:tp1:dp1 / D 1 x decode:tp1:dp1"
    assert all(c.derive is None for c in got.values())  # local/<name> is not derive's grammar
