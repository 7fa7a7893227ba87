"""The terminal matrix: one row per check, verdict in colour, reason beside it."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from servekit.accept.markdown import simulated_label
from servekit.accept.models import AcceptResult, CheckResult

STYLES = {"pass": "bold green", "fail": "bold red", "skip": "yellow"}


def verdict_text(result: CheckResult) -> Text:
    return Text(result.verdict.upper(), style=STYLES[result.verdict])


def matrix_table(result: AcceptResult) -> Table:
    """A rich table of every check with a summary caption."""
    counts = result.counts
    sim = simulated_label(result)
    table = Table(
        title=f"servekit accept: {result.target}{sim}",
        caption=(
            f"{counts.passed}/{counts.ran} passed, {counts.failed} failed, "
            f"{counts.skipped} skipped (skipped is not passed)"
        ),
    )
    table.add_column("check", no_wrap=True)
    table.add_column("verdict")
    table.add_column("time", justify="right")
    table.add_column("reason", overflow="fold")
    for check in result.checks:
        table.add_row(check.id, verdict_text(check), f"{check.duration_s:.2f}s", check.reason)
    return table


def print_matrix(result: AcceptResult, console: Console | None = None) -> None:
    (console or Console()).print(matrix_table(result))
