"""The self-check: the simulator behind the real proxy fails every negative control.

``BEFORE`` is the list the self-check failed before it moved onto the
simulator (measured on the scripted engine it replaced, whose controls were
spelled ``echo`` and ``overlong``): every needle check, judged against each of
the three wrong-answer controls. The same pairs must still fail, now spelled
as the simulator's ``misbehave`` faults, beside the newer controls.
"""

from __future__ import annotations

import pytest

from servekit.accept.models import AcceptResult, CheckResult, EvidenceFile
from servekit.accept.selfcheck import CONTROLS, _row

from .conftest import SELFCHECK_GROUP, SelfcheckRun

NEEDLE_CHECKS = ("short", "A", "B", "C", "D", "stream", "turn1", "turn2", "turn3")
NEEDLE_CHECKS += ("prefix_cold", "prefix_hot")
RENAMED = {"wrong_code": "wrong_code", "echo": "echo_prompt", "overlong": "long_answer"}
BEFORE = tuple(
    f"selfcheck.{control}.needle.2k.{check}"
    for control in ("right", "wrong_code", "echo", "overlong")
    for check in NEEDLE_CHECKS
)


def _check(verdict: str) -> CheckResult:
    ev = EvidenceFile(
        path="evidence/needle.2k.A/01-response.json", sha256="0" * 64, kind="response"
    )
    return CheckResult(
        id="needle.2k.A",
        group="needle",
        verdict=verdict,  # type: ignore[arg-type]
        reason="why",
        evidence=(ev,),
    )


def test_right_answers_must_pass_and_controls_must_fail() -> None:
    assert _row("right", _check("pass")).verdict == "pass"
    assert _row("right", _check("fail")).verdict == "fail"
    for control in ("wrong_code", "echo_prompt", "long_answer"):
        assert _row(control, _check("fail")).verdict == "pass"
        row = _row(control, _check("pass"))
        assert row.verdict == "fail"
        assert "must be fail" in row.reason


def test_under_a_fault_the_other_checks_must_pass_and_the_targets_fail_for_its_reason() -> None:
    wrong = next(c for c in CONTROLS if c.fault == "wrong_code")
    other = _check("fail").model_copy(update={"id": "api.sse", "group": "api"})
    row = _row("wrong_code", other, wrong)
    assert row.verdict == "fail" and "must be pass" in row.reason  # the fault broke more
    spared = _row("wrong_code", other.model_copy(update={"verdict": "pass"}), wrong)
    assert spared.verdict == "pass"
    because = _check("fail").model_copy(update={"reason": "expected code A not in answer 'B'"})
    assert _row("wrong_code", because, wrong).verdict == "pass"
    for reason in ("request timed out after 60 s", "the answer was empty"):
        late = _row("wrong_code", because.model_copy(update={"reason": reason}), wrong)
        assert late.verdict == "fail" and "not for the reason wrong_code causes" in late.reason


def test_a_skipped_check_never_counts_as_exercised() -> None:
    row = _row("wrong_code", _check("skip"))
    assert row.verdict == "fail"
    assert "not exercised" in row.reason


def test_rows_are_renamed_and_point_at_their_control_folder() -> None:
    row = _row("echo_prompt", _check("fail"))
    assert row.id == "selfcheck.echo_prompt.needle.2k.A"
    assert row.evidence[0].path == "echo_prompt/evidence/needle.2k.A/01-response.json"


@pytest.fixture
def selfcheck(selfcheck_run: SelfcheckRun) -> AcceptResult:
    """The result of ``servekit accept --selfcheck`` (run once, shared with the CLI test)."""
    assert selfcheck_run.proc.returncode == 0, selfcheck_run.proc.stderr[-2000:]
    return AcceptResult.model_validate_json((selfcheck_run.out / "result.json").read_text())


def _now(before_id: str) -> str:
    _, control, rest = before_id.split(".", 2)
    return f"selfcheck.{RENAMED.get(control, control)}.{rest}"


@pytest.mark.slow
@SELFCHECK_GROUP
def test_every_control_that_failed_before_still_fails(selfcheck: AcceptResult) -> None:
    rows = {c.id: c for c in selfcheck.checks}
    for before in BEFORE:
        row = rows[_now(before)]
        assert row.verdict == "pass", (row.id, row.reason)
        want = "judged pass" if ".right." in row.id else "judged fail"
        assert row.reason.startswith(want), (row.id, row.reason)


@pytest.mark.slow
@SELFCHECK_GROUP
def test_each_fault_control_fails_exactly_its_checks(selfcheck: AcceptResult) -> None:
    """Both directions over the whole matrix: the control's checks fail for its reason,
    and every other check still passes under the same fault."""
    assert selfcheck.exit_code == 0 and selfcheck.sim_speed == 1.0
    right = [c.id.split(".", 2)[2] for c in selfcheck.checks if c.id.startswith("selfcheck.right.")]
    for control in CONTROLS:
        rows = {
            c.id.split(".", 2)[2]: c
            for c in selfcheck.checks
            if c.id.startswith(f"selfcheck.{control.fault}.")
        }
        assert sorted(rows) == sorted(right), control.fault  # the whole matrix ran
        hit = [i for i in rows if control.targets(i)]
        spared = [i for i in rows if not control.targets(i)]
        assert hit and spared, control.fault
        for check_id in hit:
            assert rows[check_id].reason.startswith("judged fail as it must"), rows[check_id]
        for check_id in spared:
            assert rows[check_id].reason.startswith("judged pass as it must"), rows[check_id]
    echo = {c.id: c for c in selfcheck.checks}["selfcheck.echo_prompt.needle.2k.A"]
    assert "echoes the prompt's instruction" in echo.reason  # the echo rule, not the length


@pytest.mark.slow
@SELFCHECK_GROUP
def test_evidence_of_every_control_is_kept(selfcheck: AcceptResult) -> None:
    assert all(row.evidence for row in selfcheck.checks)
    assert {r.evidence[0].path.split("/")[0] for r in selfcheck.checks} == {
        "right",
        *(c.fault for c in CONTROLS),
    }
