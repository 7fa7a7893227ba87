"""verify of a packaged layout writes its ledger to the user's data folder, not the catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from servekit.catalog.ledger import read_records, verification_status
from servekit.catalog.loader import load, packaged_catalog
from servekit.verify.run import VerifyOptions, verify

from .support import SimRunner, components


def ledgers_in(folder: Path) -> set[Path]:
    return set(folder.rglob("verification.jsonl"))


@pytest.mark.slow
def test_verify_of_a_packaged_layout_leaves_the_installed_catalog_untouched(
    tmp_path: Path, private_user_dirs: Path, runner: SimRunner
) -> None:
    before = ledgers_in(packaged_catalog())
    opts = VerifyOptions(name="local/1p1d", engine="sim", out=tmp_path / "run")
    out = verify(opts, components(runner))
    assert out.exit_code == 0, [s for s in out.run.steps if s.status != "ok"]
    want = private_user_dirs / "data/servekit/ledger/local/1p1d/verification.jsonl"
    assert out.ledger == want
    assert read_records(want) == [out.record]
    assert ledgers_in(packaged_catalog()) == before
    assert verification_status(load("local/1p1d")).state == "simulated-only"
