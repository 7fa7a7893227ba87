"""The self-check's bookkeeping: a negative control that passes the judge fails the row."""

from __future__ import annotations

from servekit.accept.models import CheckResult, EvidenceFile
from servekit.accept.selfcheck import _row


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
    for control in ("wrong_code", "echo", "overlong"):
        assert _row(control, _check("fail")).verdict == "pass"  # type: ignore[arg-type]
        row = _row(control, _check("pass"))  # type: ignore[arg-type]
        assert row.verdict == "fail"
        assert "must be fail" in row.reason


def test_a_skipped_check_never_counts_as_the_judge_working() -> None:
    row = _row("wrong_code", _check("skip"))
    assert row.verdict == "fail"
    assert "not exercised" in row.reason


def test_rows_are_renamed_and_point_at_their_mode_folder() -> None:
    row = _row("echo", _check("fail"))
    assert row.id == "selfcheck.echo.needle.2k.A"
    assert row.evidence[0].path == "echo/evidence/needle.2k.A/01-response.json"
