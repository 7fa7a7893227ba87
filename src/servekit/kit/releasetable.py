"""The release table a kit release carries: each seed row with its N/N and its evidence.

Rows (as in the first seed's kit releases): kit integrity, consistency
(source = payload), rebuild, smoke L1/L2, defaults spot-check (the kit's
promises), repo_rev against the release baseline. A row whose input was not
given is ``not run`` and says which option runs it.

:func:`kit_release_table` builds the typed table from a verify report;
:func:`render_release_table` renders it as Markdown; :func:`verify_release`
runs ``kit verify``, writes every evidence file and both forms of the table
into a folder. ``servekit verify NAME --kit KIT`` can embed the same table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from servekit.errors import UsageError
from servekit.kit.checks import CheckReport, CheckResult
from servekit.kit.models import KitManifest
from servekit.kit.options import KitVerifyOptions
from servekit.kit.verify import DefaultsTable, run_verify
from servekit.vocabulary import StrictModel, atomic_write_bytes, atomic_write_text, markdown_cell

TABLE_SCHEMA: Literal["servekit.kit-table/1"] = "servekit.kit-table/1"
RowStatus = Literal["pass", "fail", "not run"]
INTEGRITY = (
    "sidecar",
    "archive",
    "members",
    "manifest",
    "config",
    "layers",
    "payload",
    "compile",
    "generated",
)


class KitTableRow(StrictModel):
    """One row of the release table."""

    item: str = Field(description="What the row proves, as the seed names it")
    status: RowStatus
    passed: int | None = Field(None, description="Items that passed (N of N/N)")
    total: int | None = Field(None, description="Items checked")
    result: str = Field(description="One line: the figures, or what failed, or how to run it")
    evidence: str | None = Field(None, description="Evidence file, relative to the table")

    @property
    def ratio(self) -> str:
        return f"{self.passed}/{self.total}" if self.total is not None else "-"


class KitReleaseTable(StrictModel):
    """The whole table, as written to ``kit-table.json``."""

    schema_version: Literal["servekit.kit-table/1"] = TABLE_SCHEMA
    kit: str = Field(description="The kit verified (path as given)")
    name: str | None = None
    image_id: str | None = None
    repo_rev: str | None = None
    ok: bool = Field(description="No row failed")
    complete: bool = Field(description="Every row ran")
    rows: list[KitTableRow]


@dataclass(frozen=True)
class _RowSpec:
    item: str
    checks: tuple[str, ...]
    evidence: str
    how: str


ROWS = (
    _RowSpec("kit integrity", INTEGRITY, "kit-verify.json", "always runs"),
    _RowSpec(
        "consistency (source = payload)", ("consistency",), "consistency.json", "give --repo DIR"
    ),
    _RowSpec("rebuild", ("rebuild",), "rebuild.json", "give --base BASE"),
    _RowSpec(
        "smoke L1/L2",
        ("smoke",),
        "smoke.txt",
        "run 'sh selftest.sh image NONCE' in the rebuilt image, NONCE from this run's"
        " smoke-nonce.txt, and give --smoke LOG --nonce smoke-nonce.txt",
    ),
    _RowSpec(
        "defaults spot-check",
        ("defaults", "gates", "markers"),
        "expect.json",
        "declare the promises: an expect: section in the payload spec (or --expect)",
    ),
    _RowSpec(
        "repo_rev vs release baseline",
        ("repo_rev",),
        "repo_rev.json",
        "give --baseline REV, or record expect.repo_rev in the kit",
    ),
)


def _row(spec: _RowSpec, report: CheckReport) -> KitTableRow:
    ran = [c for name in spec.checks if (c := report.get(name)) is not None and c.status != "skip"]
    if not ran:
        skip = next((c for name in spec.checks if (c := report.get(name)) is not None), None)
        why = skip.detail if skip is not None and spec.item != "kit integrity" else spec.how
        return KitTableRow(item=spec.item, status="not run", result=why)
    failed = [c for c in ran if c.status == "fail"]
    counted = [c for c in ran if c.total is not None]
    if counted:
        passed = sum(c.passed or 0 for c in counted)
        total = sum(c.total or 0 for c in counted)
    else:
        passed, total = len(ran) - len(failed), len(ran)
    return KitTableRow(
        item=spec.item,
        status="fail" if failed else "pass",
        passed=passed,
        total=total,
        result=_result(spec, ran, failed),
        evidence=spec.evidence,
    )


def _result(spec: _RowSpec, ran: list[CheckResult], failed: list[CheckResult]) -> str:
    shown = failed or ran
    if spec.item == "kit integrity" and not failed:
        return f"{len(ran)} checks pass: {', '.join(c.name for c in ran)}"
    if len(spec.checks) == 1:
        return shown[0].detail
    return "; ".join(f"{c.name} {c.detail}" for c in shown)


def kit_release_table(report: CheckReport, manifest: KitManifest | None = None) -> KitReleaseTable:
    """The release table for a ``kit verify`` report (rows not run say how to run them)."""
    rows = [_row(spec, report) for spec in ROWS]
    return KitReleaseTable(
        kit=report.subject,
        name=manifest.name if manifest else None,
        image_id=manifest.image.image_id if manifest else None,
        repo_rev=manifest.code.repo_rev if manifest and manifest.code else None,
        ok=all(r.status != "fail" for r in rows),
        complete=all(r.status != "not run" for r in rows),
        rows=rows,
    )


_MARK = {"pass": "✅ pass", "fail": "❌ FAIL", "not run": "not run"}


def render_release_table(table: KitReleaseTable, link_prefix: str = "") -> str:
    """The table as Markdown; evidence links are ``link_prefix + file``."""
    title = f"`{table.name}`" if table.name else f"`{table.kit}`"
    lines = [f"## Kit {title}: release table", ""]
    if table.image_id:
        lines += [f"image `{table.image_id}`, repo_rev `{table.repo_rev or '-'}`", ""]
    lines += ["| item | status | N/N | result | evidence |", "|---|---|---:|---|---|"]
    for row in table.rows:
        link = f"[{row.evidence}]({link_prefix}{row.evidence})" if row.evidence else "-"
        lines.append(
            f"| {row.item} | {_MARK[row.status]} | {row.ratio} | {markdown_cell(row.result)} | {link} |"
        )
    return "\n".join(lines) + "\n"


def _json(row: CheckResult | None) -> str:
    return (row.model_dump_json(indent=2) if row else "null") + "\n"


def verify_release(
    options: KitVerifyOptions, table: DefaultsTable | None = None
) -> tuple[KitReleaseTable, CheckReport]:
    """Run ``kit verify``, write the evidence files and ``kit-table.md``/``.json`` into ``--out``.

    ``table`` is :func:`~servekit.kit.verify.verify_kit`'s.
    """
    out = options.out
    if out is None:
        raise UsageError("kit verify: the release table needs --out FOLDER")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {out}: exists and is not an empty folder; give a new folder")
    out.mkdir(parents=True, exist_ok=True)
    if options.smoke is None:
        from servekit.kit.smokeproof import issue_nonce

        issue_nonce(out)
    verified = run_verify(options, table)
    report = verified.report
    atomic_write_text(out / "kit-verify.json", report.model_dump_json(indent=2) + "\n")
    atomic_write_text(out / "consistency.json", _json(report.get("consistency")))
    rebuild = verified.rebuild.model_dump_json(indent=2) + "\n" if verified.rebuild else None
    atomic_write_text(out / "rebuild.json", rebuild or _json(report.get("rebuild")))
    expect = [report.get(n) for n in ("expect", "defaults", "gates", "markers")]
    atomic_write_text(
        out / "expect.json",
        "[\n" + ",\n".join(_json(r).rstrip() for r in expect if r is not None) + "\n]\n",
    )
    atomic_write_text(out / "repo_rev.json", _json(report.get("repo_rev")))
    if options.smoke is not None and options.smoke.is_file():
        from servekit.kit.smoke import MAX_LOG

        with options.smoke.open("rb") as fh:
            atomic_write_bytes(out / "smoke.txt", fh.read(MAX_LOG))
    release = kit_release_table(report, verified.manifest)
    atomic_write_text(out / "kit-table.json", release.model_dump_json(indent=2) + "\n")
    atomic_write_text(out / "kit-table.md", render_release_table(release))
    return release, report
