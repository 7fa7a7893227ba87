"""``--selfcheck``: prove the checks fail what they must before trusting a pass.

The checks run against simulator endpoints (1 prefill, 1 decode, a mixed
reference) behind servekit's real proxy: first with no fault, where every
check must pass, then once per negative control, where each control's checks
must fail. A control is a simulator fault (:class:`servekit.sim.FaultSpec`
spells them): wrong retrieval answers for the judge, and one engine bug per
invariant. Each (control, check) pair becomes one row, passing when the check
behaved, so the self-check reads like any other matrix.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servekit.accept.models import AcceptResult, CheckResult, write_result
from servekit.accept.options import AcceptOptions
from servekit.accept.runner import RESULT_FILE, run_acceptance_async

if TYPE_CHECKING:
    from servekit.accept.simstack import SimStack

SELFCHECK_CONTEXT = 2048
RIGHT = "right"
ENGINES = ("prefill", "decode")
# Steps long enough that concurrent requests share the engine (crowd_drift needs it).
PROFILE = {"name": "selfcheck", "decode_step_s": [[1, 0.005]], "label": "simulated (self-check)"}


@dataclass(frozen=True)
class Control:
    """A negative control: faults set on some endpoints, and the checks that must fail."""

    fault: str
    patch: dict[str, Any]
    checks: tuple[str, ...]
    where: tuple[str, ...] = ENGINES


CONTROLS = (
    Control("wrong_code", {"misbehave": "wrong_code"}, ("needle", "cache")),
    Control("echo_prompt", {"misbehave": "echo_prompt"}, ("needle",)),
    Control("long_answer", {"misbehave": "long_answer"}, ("needle",)),
    Control("stream_no_done", {"stream_no_done": True}, ("api.sse",)),
    Control("ignore_stop", {"ignore_stop": True}, ("api.finish_reason",)),
    Control("usage_off_by_one", {"usage_off_by_one": True}, ("api.usage",)),
    Control("stream_mismatch", {"stream_mismatch": True}, ("invariant.stream_equals_nonstream",)),
    Control(
        "crowd_drift",
        {"crowd_drift": True},
        ("invariant.concurrent_equals_serial", "invariant.long_beside_short"),
    ),
    Control("no_prefix_cache", {"no_prefix_cache": True}, ("invariant.prefix_hot_cold", "cache")),
    Control("no_kv_handoff", {"no_kv_handoff": True}, ("invariant.pd_kv_handoff",)),
    Control(
        "disagree_seed", {"disagree_seed": 7}, ("invariant.pd_equals_single",), where=("reference",)
    ),
)


def stack_spec() -> dict[str, Any]:
    """1 prefill + 1 guarded decode + a mixed reference, all long enough for 2k needles."""
    common = {"port": 0, "max_model_len": 4 * SELFCHECK_CONTEXT, "profile": PROFILE}
    return {
        "endpoints": [
            {"name": "prefill", "role": "prefill", "engine_id": "p", "kv_port": 36000, **common},
            {"name": "decode", "role": "decode", "engine_id": "d", "guard": True, **common},
            {"name": "reference", "role": "mixed", **common},
        ]
    }


def _row(control: str, check: CheckResult) -> CheckResult:
    want = "pass" if control == RIGHT else "fail"
    if check.verdict == "skip":
        verdict, reason = "fail", f"check was skipped ({check.reason}); it was not exercised"
    elif check.verdict == want:
        verdict, reason = "pass", f"judged {check.verdict} as it must: {check.reason}"
    else:
        verdict, reason = "fail", f"judged {check.verdict}, must be {want}: {check.reason}"
    evidence = tuple(e.model_copy(update={"path": f"{control}/{e.path}"}) for e in check.evidence)
    return check.model_copy(
        update={
            "id": f"selfcheck.{control}.{check.id}",
            "group": "selfcheck",
            "verdict": verdict,
            "reason": reason,
            "evidence": evidence,
        }
    )


def _cleared(patch: dict[str, Any]) -> dict[str, Any]:
    """The patch that undoes ``patch``: each fault back to its default, no disagree_seed."""
    from servekit.sim.faults import FaultSpec

    defaults = {k: f.default for k, f in FaultSpec.model_fields.items()}
    return {k: defaults.get(k) for k in patch}


def _all_checks(controls: tuple[Control, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(c for control in controls for c in control.checks))


async def _judged(
    stack: SimStack, control: str, only: tuple[str, ...], seed: str, out_dir: Path
) -> list[CheckResult]:
    options = AcceptOptions(only=only, contexts=(SELFCHECK_CONTEXT,), seed=seed, timeout_s=60)
    result = await run_acceptance_async(stack.deployment, options, out_dir / control)
    return [_row(control, c) for c in result.checks]


def _set(stack: SimStack, names: tuple[str, ...], patch: dict[str, Any]) -> None:
    for name in names:
        stack.sim.set_faults(name, **patch)


async def run_selfcheck_async(
    out_dir: Path, seed: str = "selfcheck", controls: tuple[Control, ...] = CONTROLS
) -> AcceptResult:
    """Every check right first, then each control; one row per (control, check)."""
    from servekit.accept.simstack import sim_stack

    started = datetime.now(UTC).isoformat(timespec="seconds")
    start = time.perf_counter()
    rows: list[CheckResult] = []
    with sim_stack(stack_spec(), out_dir / "logs", reference="reference") as stack:
        rows += await _judged(stack, RIGHT, _all_checks(controls), seed, out_dir)
        for control in controls:
            _set(stack, control.where, control.patch)
            rows += await _judged(stack, control.fault, control.checks, seed, out_dir)
            _set(stack, control.where, _cleared(control.patch))
        speed = stack.deployment.sim_speed
    accept = AcceptResult(
        target="simulator behind servekit proxy (self-check)",
        model=stack.deployment.model,
        simulated=True,
        started_at=started,
        duration_s=round(time.perf_counter() - start, 3),
        contexts=(SELFCHECK_CONTEXT,),
        sim_speed=speed,
        checks=tuple(rows),
    )
    write_result(accept, out_dir / RESULT_FILE)
    return accept
