"""The terminal tables of up, status and accept fit 80 columns and never cut a cell to ``…``.

rich's default is to shrink a too-wide table by ellipsis; a 52-engine A3 layout has
process names such as ``decode0-dp15`` and health texts of a sentence, which at 80
columns became ``deco…``. Every table here folds instead (issue 16, point 5).
"""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console
from rich.table import Table

from servekit.accept.matrix import matrix_table
from servekit.accept.models import AcceptResult
from servekit.local.display import state_table
from servekit.local.state import ProcState, RunState

LONG = "health 200, model listed, all 16 data-parallel ranks answer /metrics with KV usage"


def _render(table: Table, width: int = 80) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, force_terminal=False, color_system=None).print(table)
    return buf.getvalue()


def _squashed(text: str) -> str:
    return "".join(ch for ch in text if ch.isalnum())


def _column(out: str, index: int) -> str:
    """One column's text top to bottom, folds joined: what a reader sees in that column."""
    cells = [line.split("│")[index + 1] for line in out.splitlines() if line.startswith("│")]
    return _squashed("".join(cells))


def _state() -> RunState:
    procs = [
        ProcState(
            name=f"decode0-dp{i:02d}-worker",
            role="decode",
            kind="engine",
            port=17100 + i,
            pid=400000 + i,
            log=Path("x"),
            phase="ready",
            detail=LONG,
        )
        for i in range(3)
    ]
    return RunState(layout="a3/1p3d", engine="sim", phase="ready", processes=procs, started_at=0.0)


def test_the_up_table_folds_long_names_and_details() -> None:
    out = _render(state_table(_state()))
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    names, details = _column(out, 0), _column(out, 5)
    for i in range(3):
        assert _squashed(f"decode0-dp{i:02d}-worker") in names
    assert details == _squashed(LONG) * 3


def test_the_accept_matrix_folds_its_reasons() -> None:
    checks = [
        {
            "id": f"needle.multi_needle_{ctx}",
            "group": "needle",
            "verdict": "pass",
            "reason": LONG,
            "duration_s": 12.5,
        }
        for ctx in ("144k", "1m")
    ]
    result = AcceptResult.model_validate(
        {
            "target": "http://127.0.0.2:8000",
            "model": "deepseek_v4",
            "simulated": True,
            "started_at": "x",
            "duration_s": 25.0,
            "checks": checks,
        }
    )
    out = _render(matrix_table(result))
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "needle.multi_needle_144k" in out and _squashed(LONG) in _squashed(out)
