"""The verification ledger: records beside the layout, and the state derived from them."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest

from servekit.catalog.ledger import (
    NOT_OBSERVED,
    LedgerRecord,
    append_record,
    ledger_path,
    read_records,
    status_from_records,
    verification_status,
)
from servekit.catalog.loader import LoadedLayout, load, packaged_catalog
from servekit.errors import UsageError

SHA = "ab" * 32


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    """A private copy of the packaged catalog, so ledgers land in tmp_path."""
    root = tmp_path / "catalog"
    shutil.copytree(packaged_catalog(), root, ignore=shutil.ignore_patterns("verification.jsonl"))
    return root


def record(loaded: LoadedLayout, **changes: object) -> LedgerRecord:
    layout = loaded.layout
    base: dict[str, object] = {
        "layout": layout.name,
        "image": layout.image,
        "versions": dict(layout.versions),
        "servekit_version": "0.1.0",
        "date": dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC),
        "engine": "vllm",
        "result": "pass",
        "acceptance": "11/11",
        "evidence_sha256": SHA,
        "report": "reports/x",
        "observed": {"engine": "GET /version, Server: uvicorn, vLLM metrics", "image": "a test"},
    }
    base.update(changes)
    return LedgerRecord.model_validate(base)


def test_ledger_sits_beside_the_layout(catalog: Path) -> None:
    loaded = load("local/1p1d", catalog)
    assert ledger_path(loaded) == catalog / "local/1p1d/verification.jsonl"


def test_append_then_read_back_in_order(catalog: Path) -> None:
    loaded = load("local/1p1d", catalog)
    first = record(loaded, result="fail")
    second = record(loaded, date=dt.datetime(2026, 11, 2, tzinfo=dt.UTC))
    append_record(loaded, first)
    path = append_record(loaded, second)
    assert read_records(path) == [first, second]
    assert path.read_text().count("\n") == 2


def test_append_refuses_another_layouts_record(catalog: Path) -> None:
    loaded = load("local/1p1d", catalog)
    other = record(load("local/single", catalog))
    with pytest.raises(UsageError, match="cannot go beside"):
        append_record(loaded, other)


def test_a_bad_ledger_line_names_file_and_line(catalog: Path) -> None:
    loaded = load("local/1p1d", catalog)
    append_record(loaded, record(loaded))
    with ledger_path(loaded).open("a") as fh:
        fh.write('{"layout": "local/1p1d"}\n')
    with pytest.raises(UsageError, match=r"verification\.jsonl:2: ledger field"):
        read_records(ledger_path(loaded))


def test_no_records_is_unverified(catalog: Path) -> None:
    status = verification_status(load("local/1p1d", catalog))
    assert status.state == "unverified"
    assert status.source == "none"
    assert "no passing run on real engines recorded for" in status.reason


def test_passing_hardware_run_on_current_image_verifies(catalog: Path) -> None:
    loaded = load("local/1p1d", catalog)
    rec = record(loaded)
    append_record(loaded, rec)
    status = verification_status(loaded)
    assert status.state == "verified"
    assert status.record == rec
    assert status.date == dt.date(2026, 11, 1)
    assert status.image == loaded.layout.image


def test_changing_the_image_makes_it_stale_with_the_reason(catalog: Path) -> None:
    loaded = load("local/1p1d", catalog)
    old = record(loaded, image="old-image:1")
    status = status_from_records(loaded.layout, [old])
    assert status.state == "stale"
    assert status.reason.startswith(
        f"verified on old-image:1 (2026-11-01), now {loaded.layout.image}"
    )


def test_changing_an_engine_version_makes_it_stale(catalog: Path) -> None:
    loaded = load("local/1p1d", catalog)
    old = record(loaded, versions={"vllm": "0.31.0"})
    status = status_from_records(loaded.layout, [old])
    assert status.state == "stale"
    assert "vllm 0.31.0 -> 0.32.0" in status.reason


def test_a_record_without_observed_facts_never_verifies(catalog: Path) -> None:
    """Records from before servekit observed the engines may hold the layout's copies."""
    loaded = load("local/1p1d", catalog)
    status = status_from_records(loaded.layout, [record(loaded, observed=None)])
    assert status.state == "unverified"
    assert "before servekit observed the engines" in status.reason


def test_unconfirmed_engines_never_verify_and_say_why(catalog: Path) -> None:
    loaded = load("local/1p1d", catalog)
    why = "1/1 engines not identified: /version says 0.32.0 but /metrics has no vllm:x"
    rec = record(loaded, engine="unconfirmed", observed={"engine": why})
    status = status_from_records(loaded.layout, [rec])
    assert status.state == "unverified"
    assert "unconfirmed engines" in status.reason and why in status.reason


def test_an_image_not_observed_verifies_on_the_versions_and_says_so(catalog: Path) -> None:
    loaded = load("local/1p1d", catalog)
    rec = record(loaded, image=NOT_OBSERVED)
    status = status_from_records(loaded.layout, [rec])
    assert status.state == "verified"
    assert status.reason.startswith("verified on real vLLM engines (acceptance 11/11, vllm 0.32.0")
    assert f"not observed: image {loaded.layout.image}" in status.reason
    # an observed version that differs still makes it stale
    other = record(loaded, image=NOT_OBSERVED, versions={"vllm": "0.31.0"})
    assert status_from_records(loaded.layout, [other]).state == "stale"


def test_simulated_pass_never_counts_as_hardware(catalog: Path) -> None:
    loaded = load("local/1p1d", catalog)
    status = status_from_records(loaded.layout, [record(loaded, engine="sim")])
    assert status.state == "simulated-only"
    assert "not hardware-verified" in status.reason


def test_failed_run_does_not_verify(catalog: Path) -> None:
    loaded = load("local/1p1d", catalog)
    status = status_from_records(loaded.layout, [record(loaded, result="fail")])
    assert status.state == "unverified"
    assert "failed" in status.reason


def test_latest_matching_pass_wins_over_older_stale_one(catalog: Path) -> None:
    loaded = load("local/1p1d", catalog)
    old = record(loaded, image="old", date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    new = record(loaded)
    assert status_from_records(loaded.layout, [new, old]).record == new


def test_records_of_other_layouts_are_ignored(catalog: Path) -> None:
    loaded = load("local/1p1d", catalog)
    other = record(load("local/single", catalog))
    assert status_from_records(loaded.layout, [other]).state == "unverified"


def test_seed_record_on_current_image_is_honoured(catalog: Path) -> None:
    loaded = load("a3/dsv41-tp8", catalog)
    status = verification_status(loaded)
    assert status.state == "verified"
    assert status.source == "provenance"
    assert status.date == dt.date(2026, 10, 5)


def test_seed_record_on_another_image_is_stale(catalog: Path) -> None:
    loaded = load("a3/dsv41-tp8", catalog)
    moved = loaded.layout.model_copy(update={"image": "registry/new:2"})
    status = status_from_records(moved, [])
    assert status.state == "stale"
    assert "now registry/new:2" in status.reason


def test_previously_verified_layout_is_stale_and_says_so(catalog: Path) -> None:
    status = verification_status(load("a3/1p1d", catalog))
    assert status.state == "stale"
    assert "earlier image" in status.reason


def test_derived_layout_names_its_origin(catalog: Path) -> None:
    # a3/2p2d is an alias; its layout's servekit.yaml carries the hand-made one's derivation
    status = verification_status(load("a3/2p2d", catalog))
    assert status.state == "derived"
    assert status.reason == "derived from a3/deepseekv4-flash/1p1d, not separately validated"


def test_sim_run_on_derived_layout_keeps_derived_and_notes_the_sim(catalog: Path) -> None:
    loaded = load("a3/2p2d", catalog)
    status = status_from_records(loaded.layout, [record(loaded, engine="sim")])
    assert status.state == "derived"
    assert "simulated run passed 2026-11-01 (not hardware-verified)" in status.reason


def test_every_catalog_layout_has_a_status(catalog: Path) -> None:
    from servekit.catalog.loader import load_all

    states = {item.layout.name: verification_status(item).state for item in load_all(catalog)}
    assert states["a3/dsv41-ced-pd"] == "verified"
    assert states["local/single"] == "unverified"
    assert set(states.values()) <= {"verified", "stale", "unverified", "derived", "simulated-only"}


def test_packaged_layout_keeps_its_ledger_in_the_user_data_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    loaded = load("local/1p1d")  # the packaged catalog
    want = tmp_path / "data/servekit/ledger/local/1p1d/verification.jsonl"
    assert ledger_path(loaded) == want
    rec = record(loaded)
    assert append_record(loaded, rec) == want
    assert read_records(want) == [rec]
    assert not (loaded.folder / "verification.jsonl").exists()
    assert verification_status(loaded).record == rec


def test_without_xdg_data_home_the_ledger_goes_under_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    # a3/1p1d is an alias: the ledger goes under the layout's own name
    want = tmp_path / ".local/share/servekit/ledger/a3/deepseekv4-flash/1p1d/verification.jsonl"
    assert ledger_path(load("a3/1p1d")) == want


def test_a_relative_xdg_data_home_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", "relative/data")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ledger_path(load("local/single")).is_relative_to(tmp_path / ".local/share/servekit")


def test_a_ledger_shipped_beside_a_packaged_layout_is_read_not_written(
    catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import servekit.catalog.ledger as ledger_mod

    monkeypatch.setattr(ledger_mod, "packaged_catalog", lambda: catalog)
    loaded = load("local/1p1d", catalog)
    shipped = record(loaded, engine="sim")
    (loaded.folder / "verification.jsonl").write_text(shipped.model_dump_json() + "\n")
    mine = record(loaded, date=dt.datetime(2026, 11, 3, tzinfo=dt.UTC))
    path = append_record(loaded, mine)
    assert path.is_relative_to(tmp_path / "xdg/data/servekit/ledger")
    assert ledger_mod.ledger_records(loaded) == [shipped, mine]
    assert read_records(loaded.folder / "verification.jsonl") == [shipped]
    assert verification_status(loaded).state == "verified"
