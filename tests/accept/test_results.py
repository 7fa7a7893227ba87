"""Result files, evidence, the Markdown section and the terminal matrix."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from rich.console import Console
from tests.helpers.api import isort_order

from servekit.accept import (
    AcceptOptions,
    AcceptResult,
    CheckResult,
    read_result,
    render_markdown,
    run_accept,
    summary_line,
    write_result,
)
from servekit.accept.matrix import print_matrix
from servekit.errors import UsageError

from .stacks import sim_pd


def _result(*verdicts: str) -> AcceptResult:
    checks = tuple(
        CheckResult(id=f"g.c{i}", group="g", verdict=v, reason=f"r{i}")  # type: ignore[arg-type]
        for i, v in enumerate(verdicts)
    )
    return AcceptResult(
        target="http://x", model="m", simulated=True, started_at="t", duration_s=1, checks=checks
    )


def test_skipped_is_never_counted_as_passed() -> None:
    result = _result("pass", "skip", "skip")
    assert result.counts.passed == 1
    assert result.counts.ran == 1
    assert result.exit_code == 0
    assert summary_line(result) == "Acceptance (simulated): 1/1 passed, 0 failed, 2 skipped"
    assert _result("skip", "skip").exit_code == 1
    assert _result("pass", "fail").exit_code == 1


def test_a_fast_simulation_says_its_speed() -> None:
    fast = _result("pass").model_copy(update={"sim_speed": 50.0})
    assert (
        summary_line(fast) == "Acceptance (simulated at 50x speed): 1/1 passed, 0 failed, 0 skipped"
    )
    real = _result("pass").model_copy(update={"simulated": False, "sim_speed": None})
    assert summary_line(real).startswith("Acceptance: 1/1 passed")


def test_result_round_trips_through_json(tmp_path: Path) -> None:
    result = _result("pass", "fail", "skip")
    write_result(result, tmp_path / "r.json")
    assert read_result(tmp_path / "r.json") == result


def test_reading_a_bad_result_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not found"):
        read_result(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"target": 1}')
    with pytest.raises(UsageError, match="not a valid result"):
        read_result(tmp_path / "bad.json")


def test_evidence_files_exist_and_match_their_sha256(tmp_path: Path) -> None:
    with sim_pd(tmp_path) as stack:
        options = AcceptOptions(
            only=("guard", "needle.2k.A"), context=("2k",), out=tmp_path / "out"
        )
        result = run_accept(options, deployment=stack.deployment)
    for check in result.checks:
        assert {e.kind for e in check.evidence} == {"request", "response"}
        for ev in check.evidence:
            data = (tmp_path / "out" / ev.path).read_bytes()
            assert hashlib.sha256(data).hexdigest() == ev.sha256
    guard = result.checks[0]
    first_response = json.loads((tmp_path / "out" / guard.evidence[1].path).read_text())
    assert first_response["status"] == 400
    assert first_response["sim_speed"] == 1.0  # wall times of a simulation, with its speed
    request = json.loads((tmp_path / "out" / guard.evidence[0].path).read_text())
    assert "kv_transfer_params" not in request["json"]
    assert len(request["sha256_of_bytes_sent"]) == 64


def test_markdown_section_links_evidence_and_lists_skips(tmp_path: Path) -> None:
    with sim_pd(tmp_path) as stack:
        options = AcceptOptions(
            only=("guard", "invariant.replicas_agree"), context=(), out=tmp_path / "out"
        )
        result = run_accept(options, deployment=stack.deployment)
    md = render_markdown(result, evidence_prefix="accept/")
    assert md.startswith("## Acceptance\n")
    assert "**Acceptance (simulated): 1/1 passed, 0 failed, 1 skipped**" in md
    assert "(accept/evidence/guard.decode_direct/01-response.json)" in md
    assert "`invariant.replicas_agree`: 0 mixed replica(s): nothing to compare" in md


def test_terminal_matrix_shows_every_check_and_the_counts() -> None:
    console = Console(record=True, width=160)
    print_matrix(_result("pass", "fail", "skip"), console)
    text = console.export_text()
    for needle in ("g.c0", "PASS", "FAIL", "SKIP", "1/2 passed, 1 failed, 1 skipped"):
        assert needle in text


def test_public_api_is_pinned() -> None:
    import servekit.accept as api

    assert api.__all__ == isort_order(api.__all__)
    assert set(api.__all__) == {
        "RESULT_FILE",
        "SOURCES",
        "AcceptOptions",
        "AcceptResult",
        "CheckResult",
        "EvidenceFile",
        "check_weight",
        "main",
        "metric_labelled",
        "read_result",
        "render_markdown",
        "run_accept",
        "run_acceptance_async",
        "summary_line",
        "weights_for",
        "write_result",
    }
