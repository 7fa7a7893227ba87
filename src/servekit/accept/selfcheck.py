"""``--selfcheck``: prove the checks fail what they must before trusting a pass.

The checks run against simulator endpoints (1 prefill, 1 decode, a mixed
reference) behind servekit's real proxy: first with no fault, where every
check must pass, then once per negative control over the whole matrix again: the
control's own checks must fail, for the reason the fault causes (their
failure message names it; a timeout or a refused connection is not that
reason), and every other check must still pass, so a fault that broke
everything, or a check that fails whatever the engine does, is caught. A
control is a simulator fault (:class:`servekit.sim.FaultSpec` spells them):
wrong retrieval answers for the judge, and one engine bug per invariant. Each
(control, check) pair becomes one row, passing when the check behaved, so the
self-check reads like any other matrix.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servekit.accept.models import AcceptResult, CheckResult, write_result
from servekit.accept.options import AcceptOptions
from servekit.accept.runner import RESULT_FILE, now_utc, run_acceptance_async
from servekit.vocabulary import PD_ROLES

if TYPE_CHECKING:
    from servekit.accept.simstack import SimStack

SELFCHECK_CONTEXT = 2048
RIGHT = "right"
# Steps long enough that concurrent requests share the engine (crowd_drift needs it).
PROFILE = {"name": "selfcheck", "decode_step_s": [[1, 0.005]], "label": "simulated (self-check)"}


@dataclass(frozen=True)
class Control:
    """A negative control: faults set on some endpoints, the checks that must fail, and
    what their failure message must say (the fault's effect, not a timeout)."""

    fault: str
    patch: dict[str, Any]
    checks: tuple[str, ...]
    where: tuple[str, ...] = PD_ROLES
    because: tuple[str, ...] = ()
    """Substrings of which a failing row's reason must hold one (empty: any reason but
    a timeout or a connection failure)."""

    def targets(self, check_id: str) -> bool:
        """Whether ``check_id`` is one of the checks this fault must make fail."""
        return any(check_id == sel or check_id.startswith(sel + ".") for sel in self.checks)


NOT_THE_FAULT = ("timed out", "timeout", "connection refused", "cannot connect", "disconnected")
"""A failure for one of these reasons says nothing about the fault."""


STREAMED = ("needle.2k.stream", "cache")
"""Checks that read a streamed answer: a fault of the stream fails them too."""

CONTROLS = (
    Control("wrong_code", {"misbehave": "wrong_code"}, ("needle", "cache"),
            because=("expected code",)),
    Control("echo_prompt", {"misbehave": "echo_prompt"}, ("needle", "cache"),
            because=("echoes the prompt's instruction",)),
    Control("long_answer", {"misbehave": "long_answer"}, ("needle", "cache"),
            because=("characters, over",)),
    Control("stream_no_done", {"stream_no_done": True}, ("api.sse", *STREAMED),
            because=("without [DONE]",)),
    Control("ignore_stop", {"ignore_stop": True}, ("api.finish_reason",),
            because=("finish_reason 'length'",)),
    Control("usage_off_by_one", {"usage_off_by_one": True}, ("api.usage",),
            because=("!= /tokenize count",)),
    Control("stream_mismatch", {"stream_mismatch": True},
            ("invariant.stream_equals_nonstream", *STREAMED),
            because=("stream differs from non-stream", "not in answer")),
    Control("crowd_drift", {"crowd_drift": True},
            ("invariant.concurrent_equals_serial", "invariant.long_beside_short"),
            because=("differ at char",)),
    Control("no_prefix_cache", {"no_prefix_cache": True},
            ("invariant.prefix_hot_cold", "cache"), because=("no prefix-cache hit",)),
    Control("no_kv_handoff", {"no_kv_handoff": True}, ("invariant.pd_kv_handoff",),
            because=("loaded no KV through the connector",)),
    Control("disagree_seed", {"disagree_seed": 7}, ("invariant.pd_equals_single",),
            where=("reference",), because=("deployment vs reference",)),
)  # fmt: skip


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


def _row(control: str, check: CheckResult, fault: Control | None = None) -> CheckResult:
    """One (control, check) row: ``fault`` is the control in force (None: no fault)."""
    targeted = fault is not None and fault.targets(check.id)
    want = "fail" if (control != RIGHT and fault is None) or targeted else "pass"
    if check.verdict == "skip":
        verdict, reason = "fail", f"check was skipped ({check.reason}); it was not exercised"
    elif check.verdict != want:
        verdict, reason = "fail", f"judged {check.verdict}, must be {want}: {check.reason}"
    elif want == "fail" and fault is not None and not _for_the_fault(fault, check.reason):
        verdict = "fail"
        reason = f"judged fail, but not for the reason {fault.fault} causes: {check.reason}"
    else:
        verdict, reason = "pass", f"judged {check.verdict} as it must: {check.reason}"
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


def _for_the_fault(fault: Control, reason: str) -> bool:
    low = reason.lower()
    if any(word in low for word in NOT_THE_FAULT):
        return False
    return not fault.because or any(b.lower() in low for b in fault.because)


def _cleared(patch: dict[str, Any]) -> dict[str, Any]:
    """The patch that undoes ``patch``: each fault back to its default, no disagree_seed."""
    from servekit.sim import FaultSpec

    defaults = {k: f.default for k, f in FaultSpec.model_fields.items()}
    return {k: defaults.get(k) for k in patch}


def _all_checks(controls: tuple[Control, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(c for control in controls for c in control.checks))


async def _judged(
    stack: SimStack,
    control: str,
    only: tuple[str, ...],
    seed: str,
    out_dir: Path,
    *,
    fault: Control | None = None,
) -> list[CheckResult]:
    options = AcceptOptions(only=only, context=(str(SELFCHECK_CONTEXT),), seed=seed, timeout_s=60)
    result = await run_acceptance_async(stack.deployment, options, out_dir / control)
    return [_row(control, c, fault) for c in result.checks]


def _set(stack: SimStack, names: tuple[str, ...], patch: dict[str, Any]) -> None:
    for name in names:
        stack.sim.set_faults(name, **patch)


async def run_selfcheck_async(
    out_dir: Path, seed: str = "selfcheck", controls: tuple[Control, ...] = CONTROLS
) -> AcceptResult:
    """Every check right first, then each control; one row per (control, check)."""
    from servekit.accept.simstack import sim_stack

    started = now_utc()
    start = time.perf_counter()
    rows: list[CheckResult] = []
    matrix = _all_checks(controls)
    # Migration off: each control must reach the checks as the faulty engine answers.
    # With it on, the proxy carries a stream that ends without [DONE] to another
    # decoder and then ends it with its own error event, which hides the fault.
    with sim_stack(
        stack_spec(),
        out_dir / "logs",
        reference="reference",
        proxy_options={"migration_limit": 0},
    ) as stack:
        rows += await _judged(stack, RIGHT, matrix, seed, out_dir)
        for control in controls:
            _set(stack, control.where, control.patch)
            rows += await _judged(stack, control.fault, matrix, seed, out_dir, fault=control)
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
