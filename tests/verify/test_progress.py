"""verify's overall bar: acceptance checks by weight, benchmark runs, the kit."""

from __future__ import annotations

import io

from rich.console import Console

from servekit.accept.models import CheckResult
from servekit.verify.progress import HOOKS, VerifyProgress, accept_units


def test_the_adapters_report_through_the_hooks_while_measuring() -> None:
    out = io.StringIO()
    progress = VerifyProgress(Console(file=out, width=120))
    units = accept_units(["2k"])
    assert "needle.2k.A" in units and "guard.decode_direct" in units
    with progress.measuring(sum(units.values()) + 4):
        hooks = HOOKS.get()
        hooks.on_check(CheckResult(id="service.health", group="service", verdict="pass", reason=""))
        hooks.on_bench("multi_stream N=4", 1, 2)
        hooks.on_bench("multi_stream N=4", 2, 2)
        hooks.on_bench("multi_stream N=4", 2, 2)  # repeated reports count once
    assert [c.id for c in progress.checks] == ["service.health"]
    assert "verify: finished in" in out.getvalue()
    assert HOOKS.get().on_check is not hooks.on_check  # reset after the block


def test_nothing_listens_outside_a_run() -> None:
    hooks = HOOKS.get()
    hooks.on_check(CheckResult(id="x", group="x", verdict="pass", reason=""))
    hooks.on_bench("x", 1, 1)
