"""The data behind the catalog site: one entry per layout, from catalog, Plan and ledger."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from servekit.catalog import (
    Layout,
    LayoutName,
    LedgerRecord,
    LoadedLayout,
    VerificationStatus,
    ledger_records,
    observed_summary,
    status_from_records,
)
from servekit.render import (
    Plan,
    ProcessPlan,
    build_plan,
    device_span,
    model_of,
    source_claim,
)
from servekit.report.site.topology import TopologyClass, classify, svg
from servekit.report.usage import usage
from servekit.report.view import Command


@dataclass(frozen=True)
class PlanRow:
    node: int
    process: str
    role: str
    engine_id: str
    dp: str
    devices: str
    ports: str


@dataclass(frozen=True)
class ReportLink:
    """A ledger record and where its report can be opened from the site."""

    record: LedgerRecord
    href: str | None

    @property
    def observed(self) -> str:
        """How the record's facts were observed, for the reports table."""
        return observed_summary(self.record)


@dataclass(frozen=True)
class Entry:
    """One layout as the site shows it."""

    layout: Layout
    hardware: str
    topology: TopologyClass
    status: VerificationStatus
    plan: Plan
    plan_rows: tuple[PlanRow, ...]
    svg: str
    reports: tuple[ReportLink, ...]
    page: str
    model: str = ""
    source_claim: str = "-"
    usage: tuple[Command, ...] = ()
    """How to run it: the report's own steps (report/usage.py), from the Plan."""

    @property
    def name(self) -> str:
        return self.layout.name


def _ports(p: ProcessPlan) -> str:
    named = (("api", p.api_port), ("kv", p.kv_port), ("rpc", p.rpc_port))
    return " ".join(f"{k} {v}" for k, v in named if v is not None) or "-"


def _dp(p: ProcessPlan) -> str:
    if p.dp_rank is None:
        return "-"
    head = " headless" if p.headless else ""
    return f"{p.dp_rank}/{p.dp_size}{head}"


def plan_rows(plan: Plan) -> tuple[PlanRow, ...]:
    return tuple(
        PlanRow(
            node=p.node,
            process=p.name,
            role=p.role,
            engine_id=p.engine_id or "-",
            dp=_dp(p),
            devices=device_span(p.devices),
            ports=_ports(p),
        )
        for p in plan.processes
    )


def _copy_report(record: LedgerRecord, out: Path, slug: str, index: int) -> str | None:
    """Copy a record's self-contained report.html into the site; its site-relative path."""
    source = Path(record.report) / "report.html"
    if not source.is_file():
        return None
    rel = f"reports/{slug}/{record.date.strftime('%Y%m%dT%H%M%SZ')}-{index}.html"
    (out / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, out / rel)
    return rel


def entry_for(loaded: LoadedLayout, out: Path) -> Entry:
    layout = loaded.layout
    records = ledger_records(loaded)
    plan = build_plan(layout)
    slug = layout.name.replace("/", "__")
    mine = [r for r in records if r.layout == layout.name]
    links = tuple(ReportLink(r, _copy_report(r, out, slug, i)) for i, r in enumerate(mine))
    return Entry(
        layout=layout,
        hardware=LayoutName.parse(layout.name).hardware,
        topology=classify(layout),
        status=status_from_records(layout, records),
        plan=plan,
        plan_rows=plan_rows(plan),
        svg=svg(plan, layout),
        reports=tuple(reversed(links)),
        page=f"layouts/{slug}.html",
        model=model_of(layout),
        source_claim=source_claim(layout),
        usage=usage(plan),
    )
