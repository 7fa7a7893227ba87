"""The acceptance section of a release report, in Markdown, rebuilt from a result file.

The seeds' release pages state "144K 11/11 passed, 0 failed"; this renders that
line and the table behind it, with a link to each check's evidence so every
figure traces back to what was sent and received.
"""

from __future__ import annotations

from servekit.accept.models import AcceptResult, CheckResult
from servekit.vocabulary import markdown_cell

ICONS = {"pass": "✅ pass", "fail": "❌ fail", "skip": "⏭ skip"}


def _evidence(check: CheckResult, prefix: str) -> str:
    responses = [e for e in check.evidence if e.kind == "response"]
    if not responses:
        return "-"
    first = responses[0]
    more = f" (+{len(responses) - 1})" if len(responses) > 1 else ""
    return f"[{first.sha256[:12]}]({prefix}{first.path}){more}"


def simulated_label(result: AcceptResult) -> str:
    """`` (simulated)``, with the speed when it was not real time; empty for real engines."""
    if not result.simulated:
        return ""
    speed = result.sim_speed
    return " (simulated)" if speed in (None, 1.0) else f" (simulated at {speed:g}x speed)"


def summary_line(result: AcceptResult) -> str:
    """``Acceptance: 18/18 passed, 0 failed, 5 skipped``: skipped never counted as passed."""
    c = result.counts
    sim = simulated_label(result)
    return f"Acceptance{sim}: {c.passed}/{c.ran} passed, {c.failed} failed, {c.skipped} skipped"


def render_markdown(result: AcceptResult, evidence_prefix: str = "", heading: str = "##") -> str:
    """The Markdown section; ``evidence_prefix`` is the result folder relative to the report."""
    lines = [
        f"{heading} Acceptance",
        "",
        f"**{summary_line(result)}** against `{result.target}`, model `{result.model}`, "
        f"{result.started_at}, {result.duration_s:.1f} s.",
        "",
        "| check | verdict | reason | time | evidence |",
        "|---|---|---|---:|---|",
    ]
    for check in result.checks:
        lines.append(
            f"| `{check.id}` | {ICONS[check.verdict]} | {markdown_cell(check.reason)} | "
            f"{check.duration_s:.2f} s | {_evidence(check, evidence_prefix)} |"
        )
    skipped = [c for c in result.checks if c.verdict == "skip"]
    if skipped:
        lines += ["", "Not run (and not counted as passed):", ""]
        lines += [f"- `{c.id}`: {c.reason}" for c in skipped]
    return "\n".join(lines) + "\n"
