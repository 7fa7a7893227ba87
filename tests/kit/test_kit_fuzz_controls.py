"""benchmarks/kit_fuzz.py has a positive control and counts every command's verdict.

The undamaged kit goes through the same worker code first: verify must pass
it and inspect and rebuild accept it, or the campaign stops (a verify that
refused everything would otherwise read as 100% detected). A damaged kit's
inspect and rebuild verdicts are counted beside verify's.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from servekit.kit.checks import CheckReport, failed

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _fuzz() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("kit_fuzz", BENCH / "kit_fuzz.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["kit_fuzz"] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def fuzz() -> ModuleType:
    return _fuzz()


@pytest.fixture(scope="module")
def fx(fuzz: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return fuzz.cases.make_fixture(tmp_path_factory.mktemp("fuzz") / "fx")


class OnePool:
    """The campaign's Pool, run in this process (same _run, no worker process)."""

    def __init__(self, fuzz: ModuleType, fx: Any, scratch: Path) -> None:
        self.fuzz, self.fx, self.scratch = fuzz, fx, scratch

    def run(self, jobs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
        return {j["id"]: self.fuzz._run(self.fx, j, self.scratch) for j in jobs}


def test_the_undamaged_kit_passes_every_command(fuzz: ModuleType, fx: Any, tmp_path: Path) -> None:
    assert fuzz.positive_control(OnePool(fuzz, fx, tmp_path)) == fuzz.CLEAN_OK


def test_a_verify_that_refuses_everything_fails_the_control(
    fuzz: ModuleType, fx: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        fuzz,
        "verify_kit",
        lambda *a, **k: CheckReport(subject="x", checks=[failed("content", ["refuses all"])]),
    )
    got = fuzz.positive_control(OnePool(fuzz, fx, tmp_path))
    assert got["verify"] == "failed" and got != fuzz.CLEAN_OK


def test_inspect_and_rebuild_verdicts_are_counted(
    fuzz: ModuleType, fx: Any, tmp_path: Path
) -> None:
    job = {"id": 0, "kind": "structured", "name": "random bytes", "cuts": 1, "rebuild": True}
    result = fuzz._run(fx, job, tmp_path)
    assert result["verify"] == "detected"
    assert result["inspect"] in ("detected", "undetected")
    assert result["rebuild"] in ("detected", "undetected")
    tally = fuzz.Tally()
    tally.add_commands(job["name"], result, "{}")
    assert set(tally.commands) == {"verify", "inspect", "rebuild"}
