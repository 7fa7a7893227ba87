"""A small calibration and ranking on the simulator, and proof the fit reads only measurements.

A simulated engine is started with a profile made up here (inline in the spec,
no file the advisor could find), calibrated through ``servekit advise
calibrate``'s own run (bench workloads over HTTP and the running-sequences
probe) with every way of loading a simulator profile made to fail in this
process, and the fit is held to the made-up profile. A second engine twice as
slow to decode is the control: its fit moves with it, so the numbers come from
the engine, not from anywhere else.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.cli import servekit_inproc

from servekit.advise import (
    AdviseCalibrateOptions,
    AdviseOptions,
    Calibration,
    read_calibration,
    run_advise,
    run_calibrate,
)
from servekit.advise.calibrate import PROBES_FILE
from servekit.advise.fit import prefill_seconds
from servekit.advise.observe import PrefillObs
from servekit.catalog import LedgerRecord, append_record, load
from servekit.sim.testing import running_sim

pytestmark = pytest.mark.slow


def hidden(decode_scale: float = 1.0) -> dict[str, Any]:
    """An engine nobody ships: fast enough for a test, shaped like a real one."""
    return {
        "name": "hidden",
        "block_size": 16,
        "kv_capacity_tokens": 262144,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 512,
        "prefill_overhead_s": 0.008,
        "prefill_per_token_s": 4e-5,
        "decode_step_s": [[1, 0.004 * decode_scale], [8, 0.010 * decode_scale]],
        "answer_tokens": [12, 40],
    }


def calibrate(url: str, out: Path, max_batch: int = 16, max_prompt: int = 2048) -> Calibration:
    opts = AdviseCalibrateOptions(
        out=out, target=url, shape=("mixed:tp1:dp1",), name="hidden", max_batch=max_batch,
        max_prompt=max_prompt, decode_isl=32, decode_osl=24,
    )  # fmt: skip
    return run_calibrate(opts)


def serve(profile: dict[str, Any]) -> Any:
    spec = {"endpoints": [{"name": "e", "port": 0, "max_model_len": 4096, "profile": profile}]}
    return running_sim(spec)


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The hidden engine calibrated while every simulator profile loader fails."""
    import servekit.sim.profile as prof

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("the advisor read a simulator profile")

    out = tmp_path_factory.mktemp("cal")
    with serve(hidden()) as sim, pytest.MonkeyPatch.context() as m:
        m.setattr(prof, "load_profile", refuse)
        m.setattr(prof, "profile_from_mapping", refuse)
        m.setattr(prof, "builtin_profile_names", refuse)
        calibrate(sim.url, out)
    return out


def test_the_fit_is_the_hidden_engines_and_a_control_moves_it(
    calibrated: Path, tmp_path: Path
) -> None:
    (fit,) = read_calibration(calibrated).engines
    assert fit.engine == "sim" and fit.kv_capacity_tokens == 262144 and fit.block_size == 16
    assert fit.decode.max_running == 8  # the probe saw the engine's own limit
    assert fit.decode.step_s(1) == pytest.approx(0.004, rel=0.15)
    assert fit.decode.step_s(8) == pytest.approx(0.010, rel=0.15)
    # a lone 2048-token prompt: 4 steps of 512 tokens, 8 ms each + 40 us a token = 113.9 ms
    # (what the fit says, whichever way it splits overhead and chunks on a loaded host)
    lone = PrefillObs((2048,), (0,), 0.0, "")
    assert prefill_seconds(fit.prefill, lone) == pytest.approx(0.1139, rel=0.25)
    hit = PrefillObs((2048,), (1536,), 0.0, "")  # three quarters cached: 1 step, 512 tokens
    assert prefill_seconds(fit.prefill, hit) == pytest.approx(0.0285, rel=0.4)
    assert fit.prefill.rms_error_pct < 25
    assert all(Path(s).is_dir() for s in fit.sources)  # the bench results it fitted on

    with serve(hidden(decode_scale=2.0)) as slow:  # the control: the fit follows the engine
        slower = calibrate(slow.url, tmp_path / "cal-slow", max_batch=2, max_prompt=256).engines[0]
    assert slower.decode.step_s(1) == pytest.approx(2 * fit.decode.step_s(1), rel=0.2)


def test_the_calibration_ranks_the_local_layouts(calibrated: Path) -> None:
    opts = AdviseOptions(
        family="local", nodes=1, calibration=calibrated, isl="uniform:200,600",
        osl="16", rate=40.0, requests=60, slo=("ttft=200,tpot=20",), derive=False,
    )  # fmt: skip
    advice = run_advise(opts)
    names = [r.cand.name for r in advice.predicted]
    assert {"local/single", "local/dp2", "local/1p1d"} <= set(names)
    single = next(r.pred for r in advice.predicted if r.cand.name == "local/single")
    dp2 = next(r.pred for r in advice.predicted if r.cand.name == "local/dp2")
    assert single is not None and dp2 is not None
    assert dp2.goodput >= single.goodput  # two engines never serve less than one
    assert names.index("local/dp2") < names.index("local/single")
    assert advice.band_line  # the band's source is always named


def test_a_ledger_records_bench_results_fit_the_same_engine(
    calibrated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--from-ledger``: the bench results of a verify run of local/single, found by its record."""
    (fit,) = read_calibration(calibrated).engines
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    report = tmp_path / "report"
    shutil.copytree(fit.sources[0], report / "bench")
    # and the probes the calibration wrote beside it (the engine's running limit):
    # without them the limit is read from the observations, which on a loaded host
    # need not reach the engine's own 8 (CI once fitted 6.6 ms a step against 4.0)
    shutil.copy(Path(fit.sources[0]).parent / PROBES_FILE, report / PROBES_FILE)
    record = LedgerRecord(
        layout="local/single", image="x", servekit_version="test", engine="sim", result="pass",
        date=dt.datetime.now(dt.UTC), evidence_sha256="0" * 64, report=str(report),
    )  # fmt: skip
    append_record(load("local/single"), record)
    opts = AdviseCalibrateOptions(
        out=tmp_path / "cal", from_ledger="local/single", shape=("mixed:tp1:dp1",)
    )
    (again,) = run_calibrate(opts).engines
    assert again.sources == (str(report / "bench"),)
    assert again.decode.step_s(1) == pytest.approx(fit.decode.step_s(1), rel=1e-6)
    assert again.kv_capacity_tokens == fit.kv_capacity_tokens


def test_validate_runs_the_top_layout_and_prints_both(calibrated: Path, tmp_path: Path) -> None:
    """``--validate 1``: local/single started on the simulator, measured beside its prediction."""
    done = servekit_inproc(
        "advise", "--family", "local", "--calibration", str(calibrated), "--isl", "200",
        "--osl", "16", "--rate", "4", "--requests", "16", "--no-derive", "--validate", "1",
        "--validate-speed", "5", env={"COLUMNS": "250", "SERVEKIT_RUNS": str(tmp_path / "runs")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    table = done.stdout[done.stdout.index("predicted against measured") :]
    assert "goodput pred" in table and "meas" in table and "local/" in table
    assert "0/16" in table  # every replayed request answered
