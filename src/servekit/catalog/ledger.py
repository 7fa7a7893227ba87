"""The verification ledger: one JSON line per verify run of a layout.

The seeds flipped ``verified: true|false`` by hand in meta.yaml and a README table
that nothing checked. servekit keeps the evidence instead: every ``servekit verify``
run appends a :class:`LedgerRecord` (image, engine versions, date, result, the
sha256 of its evidence bundle) to the layout's ``verification.jsonl``, and
:func:`verification_status` derives the state from those records and the layout
as it is *now*. Changing the image or an engine version therefore makes a layout
``stale`` on its own, with the reason shown, and a simulated run never counts as
hardware verification.

Every fact of a record is observed, never copied from the layout: the engine
kind is what the engines answered (``servekit.verify.identity``), versions are
what they reported, and a fact nothing exposed is :data:`NOT_OBSERVED`
(``observed`` says how each fact was seen). Only a record of identified vLLM
engines (``engine: vllm`` with ``observed``) can verify; a simulated or
``unconfirmed`` one never does, nor does a record written before servekit
observed the engines (no ``observed``: its facts may be the layout's copies).
A fact not observed is not compared with the layout; the reason says so.

:func:`status_from_records` is pure (no I/O); :func:`verification_status` reads
one small file. ``layouts list`` and ``layouts check`` call it for every layout.

Where the ledger lives: a layout of a catalog folder the user gave (``--catalog``,
``SERVEKIT_CATALOG``) keeps it beside its ``layout.yaml``; a layout of the catalog
packaged with servekit keeps it in the per-user data folder
(``$XDG_DATA_HOME/servekit/ledger/<hardware>/<name>/``), so verify never writes
into site-packages or a source checkout. A ledger shipped beside a packaged layout
is still read (its records come first), never written.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from servekit.catalog.loader import LoadedLayout, packaged_catalog
from servekit.catalog.schema import Layout
from servekit.errors import UsageError, first_error
from servekit.userdirs import data_dir
from servekit.vocabulary import RunEngine, StrictModel, atomic_write_text

LEDGER_FILE = "verification.jsonl"
LEDGER_SCHEMA: Literal["servekit.ledger/1"] = "servekit.ledger/1"

NOT_OBSERVED = "not observed"
"""A fact no engine, endpoint or log line exposed (never filled in from the layout)."""
RunResult = Literal["pass", "fail"]
State = Literal["verified", "stale", "unverified", "derived", "simulated-only"]
StatusSource = Literal["ledger", "provenance", "none"]


class LedgerRecord(StrictModel):
    """One verify run of one layout, as written to the ledger."""

    schema_version: Literal["servekit.ledger/1"] = LEDGER_SCHEMA
    layout: str
    image: str
    versions: dict[str, str] = Field(default_factory=dict, description="engine versions run")
    servekit_version: str
    date: dt.datetime = Field(description="UTC time the run finished")
    engine: RunEngine = Field(
        description="what the engines answered: vllm (identified real engines), sim (the "
        "simulator), unconfirmed (could not be identified)"
    )
    result: RunResult
    acceptance: str | None = Field(default=None, description="passed/ran, e.g. '11/11'")
    evidence_sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of SHA256SUMS")
    report: str = Field(description="path of the report folder the run wrote")
    note: str | None = None
    observed: dict[str, str] | None = Field(
        default=None,
        description="how each fact was observed (engine, image, each version; 'not observed'); "
        "absent in records written before servekit observed the engines",
    )

    @property
    def simulated(self) -> bool:
        return self.engine == "sim"

    @property
    def confirmed(self) -> bool:
        """Identified real vLLM engines, with the facts observed (the only kind that verifies)."""
        return self.engine == "vllm" and self.observed is not None

    @property
    def day(self) -> str:
        return self.date.date().isoformat()


class VerificationStatus(StrictModel):
    """A layout's verification state now, the record it rests on, and why."""

    state: State
    reason: str = Field(description="one line, e.g. 'verified on X, now Y'")
    source: StatusSource
    record: LedgerRecord | None = Field(default=None, description="the ledger record it rests on")
    image: str | None = Field(default=None, description="image the verification was made on")
    date: dt.date | None = None

    @property
    def verified(self) -> bool:
        return self.state == "verified"

    @property
    def observed(self) -> str | None:
        """How the facts of the record it rests on were observed (None: no record)."""
        return observed_summary(self.record) if self.record is not None else None


def observed_summary(record: LedgerRecord) -> str:
    """One line: each fact of ``record`` and how it was observed, or that nothing was."""
    if record.observed is None:
        return "nothing (recorded before servekit observed the engines)"
    return "; ".join(f"{fact}: {how}" for fact, how in record.observed.items())


def is_packaged(loaded: LoadedLayout) -> bool:
    """True when ``loaded`` comes from the catalog installed with servekit."""
    try:
        packaged = packaged_catalog().resolve()
    except UsageError:
        return False
    return loaded.path.resolve().is_relative_to(packaged)


def user_ledger_root() -> Path:
    """The per-user folder holding the ledgers of packaged layouts."""
    return data_dir() / "ledger"


def ledger_path(loaded: LoadedLayout) -> Path:
    """Where new records of ``loaded`` go: beside a user's layout, or the user's data folder."""
    if is_packaged(loaded):
        return user_ledger_root() / loaded.layout.name / LEDGER_FILE
    return loaded.folder / LEDGER_FILE


def ledger_records(loaded: LoadedLayout) -> list[LedgerRecord]:
    """Every record of ``loaded``: a ledger shipped beside a packaged layout, then the user's.

    A record made under one of its old names (``aliases.yaml``; a user's ledger of a
    packaged layout kept under that name) counts for the layout: it is read and
    renamed to the layout's name, so the status is computed once, for one name.
    """
    path = ledger_path(loaded)
    shipped = loaded.folder / LEDGER_FILE
    records = read_records(shipped) if shipped != path else []
    records += read_records(path)
    old = loaded.aliases
    if is_packaged(loaded):
        for name in old:
            records += read_records(user_ledger_root() / name / LEDGER_FILE)
    name = loaded.layout.name
    return [r.model_copy(update={"layout": name}) if r.layout in old else r for r in records]


def read_records(path: Path) -> list[LedgerRecord]:
    """Every record of a ledger file, oldest first; a missing file is an empty ledger."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    records: list[LedgerRecord] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            records.append(_parse_line(line, f"{path}:{number}"))
    return records


def _parse_line(line: str, where: str) -> LedgerRecord:
    try:
        return LedgerRecord.model_validate(json.loads(line))
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not a JSON line ({exc.msg}); fix or remove that line") from exc
    except ValidationError as exc:
        field, msg = first_error(exc, "(record)")
        raise UsageError(
            f"{where}: ledger field {field!r}: {msg}; fix or remove that line"
        ) from exc


def append_record(loaded: LoadedLayout, record: LedgerRecord) -> Path:
    """Append ``record`` to the layout's ledger atomically; returns the ledger path.

    The whole file is rewritten through a temp file and a rename, so a crash
    leaves the old ledger or the new one, never a torn last line.
    """
    if record.layout != loaded.layout.name:
        raise UsageError(
            f"ledger record for {record.layout!r} cannot go beside {loaded.layout.name!r}; "
            "pass the record of this layout"
        )
    path = ledger_path(loaded)
    existing = path.read_text(encoding="utf-8") if path.is_file() else ""
    if existing and not existing.endswith("\n"):
        existing += "\n"
    atomic_write_text(path, existing + record.model_dump_json() + "\n")
    return path


def verification_status(
    loaded: LoadedLayout, records: Sequence[LedgerRecord] | None = None
) -> VerificationStatus:
    """The verification state of a layout from its ledger (read unless given)."""
    found = ledger_records(loaded) if records is None else records
    return status_from_records(loaded.layout, found)


VERSION_LIKE = re.compile(r"v?\d+(\.\d+)*\S*")


def comparable(value: str) -> bool:
    """A layout version an engine can report (``0.32.0``), not a note (``bundled-in-image``)."""
    return VERSION_LIKE.fullmatch(value) is not None


def matches_current(layout: Layout, record: LedgerRecord) -> bool:
    """True when every fact ``record`` observed agrees with the layout as it is now.

    A fact the run did not observe (the image, a version no engine reports) is
    not compared: it can neither confirm nor contradict; :func:`unobserved`
    names it so the status says so.
    """
    if record.image not in (NOT_OBSERVED, layout.image):
        return False
    for key, want in layout.versions.items():
        got = record.versions.get(key)
        if got is not None and comparable(want) and got != want:
            return False
    return True


def unobserved(layout: Layout, record: LedgerRecord) -> list[str]:
    """The layout's facts ``record`` could not confirm: the image, versions not reported."""
    missing = [f"image {layout.image}"] if record.image == NOT_OBSERVED else []
    missing += [
        f"{k} {v}"
        for k, v in layout.versions.items()
        if record.versions.get(k) is None or not comparable(v)
    ]
    return missing


def status_from_records(layout: Layout, records: Sequence[LedgerRecord]) -> VerificationStatus:
    """Pure: the state of ``layout`` given its ledger records (any order)."""
    mine = sorted((r for r in records if r.layout == layout.name), key=lambda r: r.date)
    hardware = [r for r in mine if r.result == "pass" and r.confirmed]
    current = [r for r in hardware if matches_current(layout, r)]
    if current:
        return _from_record("verified", current[-1], _verified_reason(layout, current[-1]))
    seed = _seed_status(layout)
    if seed is not None and seed.verified:
        return seed
    sim_note = _sim_note(mine)
    if hardware:
        return _from_record("stale", hardware[-1], _stale_reason(layout, hardware[-1]) + sim_note)
    if seed is not None:
        return seed.model_copy(update={"reason": seed.reason + sim_note})
    return _unverified(layout, mine)


def _from_record(state: State, record: LedgerRecord, reason: str) -> VerificationStatus:
    return VerificationStatus(
        state=state,
        reason=reason,
        source="ledger",
        record=record,
        image=record.image,
        date=record.date.date(),
    )


def _verified_reason(layout: Layout, record: LedgerRecord) -> str:
    where = f"acceptance {record.acceptance}, " if record.acceptance else ""
    seen = ", ".join(f"{k} {v}" for k, v in sorted(record.versions.items()))
    on = f"on {record.image}" if record.image != NOT_OBSERVED else "on real vLLM engines"
    text = f"verified {on} ({where}{seen + ', ' if seen else ''}vllm run {record.day})"
    missing = unobserved(layout, record)
    return text + (f"; not observed: {', '.join(missing)}" if missing else "")


def _stale_reason(layout: Layout, record: LedgerRecord) -> str:
    if record.image not in (NOT_OBSERVED, layout.image):
        return f"verified on {record.image} ({record.day}), now {layout.image}; re-run verify"
    changed = [
        f"{k} {record.versions.get(k, 'unrecorded')} -> {v}"
        for k, v in layout.versions.items()
        if k in record.versions and comparable(v) and record.versions[k] != v
    ]
    return f"verified with {', '.join(changed)} changed since ({record.day}); re-run verify"


def _seed_status(layout: Layout) -> VerificationStatus | None:
    """What the layout's own provenance says, checked against the current image."""
    prov = layout.provenance
    seed = prov.verification
    if seed.verified and seed.image == layout.image:
        when = f" ({seed.date})" if seed.date else ""
        reason = f"verified on {seed.image}{when} per the layout's provenance record"
        return _seed("verified", reason, seed.date, seed.image)
    if seed.verified:
        reason = f"verified on {seed.image or 'an unrecorded image'}, now {layout.image}"
        return _seed("stale", reason + "; re-run verify", seed.date, seed.image)
    if seed.previously_verified:
        reason = f"was hardware-verified at an earlier image; not re-run on {layout.image}"
        return _seed("stale", reason, seed.date, seed.image)
    if prov.derived_from:
        reason = f"derived from {prov.derived_from}, not separately validated"
        return _seed("derived", reason, None, None)
    return None


def _seed(state: State, reason: str, date: dt.date | None, image: str | None) -> VerificationStatus:
    return VerificationStatus(
        state=state, reason=reason, source="provenance", image=image, date=date
    )


def _sim_note(records: Sequence[LedgerRecord]) -> str:
    sims = [r for r in records if r.simulated and r.result == "pass"]
    notes = [f"; simulated run passed {sims[-1].day} (not hardware-verified)"] if sims else []
    doubtful = [r for r in records if r.result == "pass" and not r.simulated and not r.confirmed]
    if doubtful:
        notes.append(f"; {_unconfirmed_line(doubtful[-1])}")
    return "".join(notes)


def _unconfirmed_line(record: LedgerRecord) -> str:
    """Why a passing record of unidentified engines does not verify."""
    if record.observed is None:
        return (
            f"a run of {record.day} was recorded before servekit observed the engines "
            "(its facts may be the layout's); re-run verify"
        )
    why = record.observed.get("engine", "the engines could not be identified")
    return f"run of {record.day} passed on unconfirmed engines ({why}); not verified"


def _unverified(layout: Layout, records: Sequence[LedgerRecord]) -> VerificationStatus:
    sims = [r for r in records if r.simulated and r.result == "pass"]
    if sims:
        last = sims[-1]
        return _from_record(
            "simulated-only",
            last,
            f"simulated run only ({last.day}); not hardware-verified",
        )
    doubtful = [r for r in records if r.result == "pass" and not r.confirmed]
    if doubtful:
        return _from_record("unverified", doubtful[-1], _unconfirmed_line(doubtful[-1]))
    if records:
        last = records[-1]
        return _from_record(
            "unverified", last, f"last {last.engine} run {last.result}ed on {last.day}"
        )
    return VerificationStatus(
        state="unverified",
        reason=f"no passing run on real engines recorded for {layout.image}",
        source="none",
    )
