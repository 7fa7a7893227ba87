"""``--selfcheck``: prove the judge fails what it must before trusting a pass.

The needle checks run against the scripted engine four times: once answering
right, once each with a negative control (a wrong code, an echo of the prompt,
an over-long answer). Every needle check must pass the right answers and fail
every negative control. Each (control, check) pair becomes one row, passing
when the judge behaved, so the self-check reads like any other matrix.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

from servekit.accept.models import AcceptResult, CheckResult, write_result
from servekit.accept.options import AcceptOptions
from servekit.accept.runner import RESULT_FILE, run_acceptance_async
from servekit.accept.scripted import AnswerMode, ScriptedConfig, serve_scripted
from servekit.deployment import Deployment

SELFCHECK_CONTEXT = 2048


def _row(mode: AnswerMode, check: CheckResult) -> CheckResult:
    want = "pass" if mode == "right" else "fail"
    if check.verdict == "skip":
        verdict, reason = "fail", f"check was skipped ({check.reason}); the judge was not exercised"
    elif check.verdict == want:
        verdict, reason = "pass", f"judged {check.verdict} as it must: {check.reason}"
    else:
        verdict, reason = "fail", f"judged {check.verdict}, must be {want}: {check.reason}"
    evidence = tuple(e.model_copy(update={"path": f"{mode}/{e.path}"}) for e in check.evidence)
    return check.model_copy(
        update={
            "id": f"selfcheck.{mode}.{check.id}",
            "group": "selfcheck",
            "verdict": verdict,
            "reason": reason,
            "evidence": evidence,
        }
    )


async def run_selfcheck_async(out_dir: Path, seed: str = "selfcheck") -> AcceptResult:
    """Run every answer mode against the scripted engine; one row per (mode, check)."""
    started = datetime.now(UTC).isoformat(timespec="seconds")
    start = time.perf_counter()
    rows: list[CheckResult] = []
    options = AcceptOptions(only=("needle",), contexts=(SELFCHECK_CONTEXT,), seed=seed)
    for mode in get_args(AnswerMode):
        config = ScriptedConfig(answer_mode=mode, max_model_len=SELFCHECK_CONTEXT)
        async with serve_scripted(config) as url:
            deployment = Deployment(entry_url=url, model=config.model, capabilities=("retrieval",))
            result = await run_acceptance_async(deployment, options, out_dir / mode)
        rows.extend(_row(mode, c) for c in result.checks)
    accept = AcceptResult(
        target="scripted engine (self-check)",
        model="scripted",
        simulated=True,
        started_at=started,
        duration_s=round(time.perf_counter() - start, 3),
        contexts=(SELFCHECK_CONTEXT,),
        checks=tuple(rows),
    )
    write_result(accept, out_dir / RESULT_FILE)
    return accept
