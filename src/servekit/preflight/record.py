"""A deployment's preflight as its nodes observed it, read back from its log folder.

The first unit of a deployment writes ``LOG_DIR/preflight/<layout>/report.json``
(:mod:`servekit.preflight.node`); ``verify --logs DIR`` reads it here and
records what the nodes saw: the verdict, each unit's failures, the NPU IPs,
TLS switches and super pods they reported, the differences between them.
Nothing is filled in from the layout; a report that is absent or unreadable is
recorded as not observed, with the reason.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from servekit.preflight.node import servekit_preflight_share as share
from servekit.vocabulary import StrictModel, read_at_most

MAX_REPORT_BYTES = 16 << 20
REPORT_FILE = "report.json"


class UnitResult(StrictModel):
    """One unit's preflight, as it reported it."""

    label: str
    address: str
    verdict: Literal["ok", "fail"]
    failures: tuple[str, ...] = ()
    warnings: int = 0
    npu_ips: int = Field(default=0, description="NPU addresses it found (hccn_tool -ip/-vnic)")
    tls: tuple[int, ...] = Field(default=(), description="the TLS switches its NPUs report")
    superpods: tuple[int, ...] = Field(default=(), description="A3: its NPUs' super pod IDs")
    pings: int = Field(default=0, description="pings to its peers' NPU IPs that got through")


class PreflightRecord(StrictModel):
    """The preflight of one launch: what every unit observed, and the verdict."""

    layout: str
    verdict: Literal["pass", "fail"]
    units: tuple[UnitResult, ...]
    differences: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()
    finished: dt.datetime | None = None
    source: str = Field(description="the report.json it was read from")

    def line(self) -> str:
        """One line for the run's observed facts and the ledger."""
        when = f" at {self.finished.isoformat(timespec='seconds')}" if self.finished else ""
        if self.verdict == "pass":
            ips = sum(u.npu_ips for u in self.units)
            pings = sum(u.pings for u in self.units)
            tls = sorted({t for u in self.units for t in u.tls})
            facts = f"{ips} NPU IPs, {pings} peer pings, TLS switch {tls}" if ips else "no NPUs"
            return f"passed on {len(self.units)} units{when} ({facts}; {self.source})"
        first = "; ".join(self.failures[:2])
        return f"FAILED on {len(self.units)} units{when}: {first} ({self.source})"


def _int_values(raw: object) -> tuple[int, ...]:
    values = raw.values() if isinstance(raw, dict) else ()
    return tuple(sorted({v for v in values if isinstance(v, int) and not isinstance(v, bool)}))


def _unit(row: dict[str, Any]) -> UnitResult:
    checks = [c for c in row.get("checks", []) if isinstance(c, dict)]
    facts = row.get("facts") if isinstance(row.get("facts"), dict) else {}
    assert isinstance(facts, dict)
    pings = [p for p in row.get("pings", []) if isinstance(p, dict) and p.get("ok") is True]
    return UnitResult(
        label=share.clean(row.get("label", "?"), 80),
        address=share.clean(row.get("address", "?"), 120),
        verdict="fail" if row.get("verdict") == share.FAIL else "ok",
        failures=tuple(
            share.clean(f"{c.get('check')}: {c.get('detail')}")
            for c in checks
            if c.get("level") == share.FAIL
        ),
        warnings=sum(1 for c in checks if c.get("level") == share.WARN),
        npu_ips=len(facts.get("npu_ips") or {}),
        tls=_int_values(facts.get("tls")),
        superpods=_int_values(facts.get("superpod")),
        pings=len(pings),
    )


def report_path(logs: Path, layout: str) -> Path:
    return logs / "preflight" / share.slug(layout) / REPORT_FILE


def parse_report(doc: object, source: str) -> PreflightRecord:
    """A report.json as a record; ValueError when it is not one."""
    if not isinstance(doc, dict) or doc.get("schema") != share.REPORT_SCHEMA:
        raise ValueError(f"not a {share.REPORT_SCHEMA} document")
    rows = doc.get("units")
    if not isinstance(rows, list) or not rows:
        raise ValueError("it lists no units")
    finished = doc.get("finished")
    stamp = (
        dt.datetime.fromtimestamp(finished, dt.UTC)
        if isinstance(finished, int | float) and 0 < finished < 1e11
        else None
    )
    return PreflightRecord(
        layout=share.clean(doc.get("layout", "?"), 200),
        verdict="fail" if doc.get("verdict") == share.FAIL else "pass",
        units=tuple(_unit(r) for r in rows[: share.MAX_ITEMS] if isinstance(r, dict)),
        differences=tuple(
            share.clean(f"{d.get('what')}: {d.get('detail')}", 600)
            for d in doc.get("differences", [])
            if isinstance(d, dict)
        ),
        failures=tuple(share.clean(f, 600) for f in doc.get("failures", []) if isinstance(f, str)),
        finished=stamp,
        source=source,
    )


def read_preflight(logs: Path, layout: str) -> tuple[PreflightRecord | None, str]:
    """The preflight report a deployment's nodes wrote under ``logs``, or None and why not."""
    path = report_path(logs, layout)
    if not path.is_file():
        return None, f"no {path.relative_to(logs)} in --logs (the entries ran without it)"
    try:
        data = read_at_most(
            path, MAX_REPORT_BYTES, str(path), "larger than 16 MiB", error=ValueError
        )
        return parse_report(json.loads(data.decode("utf-8")), str(path)), ""
    except (ValueError, RecursionError) as exc:
        return None, f"{path} is not readable as a preflight report ({exc})"
