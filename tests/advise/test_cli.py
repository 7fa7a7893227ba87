"""``servekit advise`` as users run it: a ranking that names its band, and refusals in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from tests.helpers.cli import servekit_inproc
from tests.helpers.refusal import one_line_error

from servekit.advise import Calibration, EngineFit
from servekit.advise.model import DecodeFit, PrefillFit, TransferFit
from servekit.bench.tracegen import TraceShape, write_trace

FAMILY = ("--family", "a3/deepseekv4-flash", "--nodes", "4", "--devices-per-node", "16")


def engine(name: str, shapes: tuple[str, ...]) -> EngineFit:
    """A fit of the a3 simulator's shape, written as a calibration file's input would be."""
    return EngineFit(
        name=name, shapes=shapes, engine="sim", sources=("test",), block_size=128,
        kv_capacity_tokens=2_987_648,
        prefill=PrefillFit(overhead_s=0.03, per_token_s=1.39e-4, quadratic_s=0.0,
                           chunk_tokens=8192, max_prompt_measured=32768, observations=19,
                           rms_error_pct=6.7),
        decode=DecodeFit(points=((1, 0.0248), (4, 0.0462), (8, 0.0637), (16, 0.0862),
                                 (32, 0.1311)), per_context_token_s=0.0, acceptance_length=2.89,
                         max_running=32, observations=8, rms_error_pct=0.2),
    )  # fmt: skip


@pytest.fixture(scope="module")
def cal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cal")
    Calibration(
        created="test",
        engines=(
            engine("prefill", ("prefill:tp4:dp1", "prefill:tp1:dp16")),
            engine("decode", ("decode:tp1:dp1", "decode:tp1:dp32")),
        ),
        transfer=TransferFit(overhead_s=0.03, per_token_s=1e-5, observations=3),
    ).write(folder)
    return folder


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "trace.jsonl"
    return write_trace(path, TraceShape(requests=16, rate=4.0, output_tokens=(32, 96), seed=2))


@pytest.mark.slow
def test_a_bench_trace_on_the_packaged_catalog_ranks_and_names_its_band(
    cal: Path, trace: Path, tmp_path: Path
) -> None:
    out = tmp_path / "advice.json"
    done = servekit_inproc(
        "advise", *FAMILY, "--calibration", str(cal), "--trace", str(trace),
        "--slo", "ttft=1500,tpot=40", "--json", str(out), env={"COLUMNS": "220"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "error band:" in done.stdout and "docs/advise.md" in done.stdout
    assert "best: a3/deepseekv4-flash/" in done.stdout
    # mixed layouts need a mixed engine, which this calibration lacks: said, not guessed
    assert "not predicted: a3/deepseekv4-flash/1node" in done.stdout
    doc = json.loads(out.read_text())
    ranked = [r for r in doc["ranking"] if "prediction" in r]
    assert ranked and doc["label"].startswith("predicted by servekit advise")
    goodputs = [r["prediction"]["goodput"] for r in ranked if r["prediction"]["meets_slo"]]
    assert goodputs == sorted(goodputs, reverse=True)


def test_a_bad_trace_is_one_line_naming_its_line_and_field(cal: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
                   '{"timestamp": 5, "input_length": "ten", "output_length": 5}\n')  # fmt: skip
    done = servekit_inproc("advise", *FAMILY, "--calibration", str(cal), "--trace", str(bad))
    one_line_error(done, "bad.jsonl: line 2: input_length")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--trace", "nope.jsonl"), "nope.jsonl"),
        (("--isl", "2048"), "give --trace FILE, or --isl, --osl and --rate"),
        (("--isl", "gamma:1", "--osl", "8", "--rate", "2"), "--isl 'gamma:1': expected N"),
        (("--isl", "9", "--osl", "8", "--rate", "2", "--slo", "ttft=fast"), "--slo ttft=fast"),
        (("--isl", "9", "--osl", "8", "--rate", "2", "--percentile", "ttft=101"), "--percentile"),
        (("--isl", "9", "--osl", "8", "--rate", "-1"), "--rate"),
    ],
)
def test_bad_workload_flags_are_refused(cal: Path, args: tuple[str, ...], says: str) -> None:
    one_line_error(servekit_inproc("advise", *FAMILY, "--calibration", str(cal), *args), says)


def test_a_missing_or_broken_calibration_says_how_to_make_one(tmp_path: Path) -> None:
    common = (*FAMILY, "--isl", "100", "--osl", "10", "--rate", "1")
    done = servekit_inproc("advise", *common, "--calibration", str(tmp_path))
    one_line_error(done, "no calibration.json", "servekit advise calibrate")
    (tmp_path / "calibration.json").write_text(
        '{"schema_version": "servekit.advise.calibration/1"}'
    )
    one_line_error(servekit_inproc("advise", *common, "--calibration", str(tmp_path)), "field")
    one_line_error(servekit_inproc("advise", *common), "--calibration: required")


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(junk=st.binary(max_size=300))
def test_any_bytes_as_a_calibration_are_read_or_refused(tmp_path: Path, junk: bytes) -> None:
    from servekit.advise import read_calibration
    from servekit.errors import UsageError

    path = tmp_path / "calibration.json"
    path.write_bytes(junk)
    with pytest.raises(UsageError, match="--calibration"):
        read_calibration(tmp_path)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--target", "http://127.0.0.1:9"), "--shape: say which endpoint shapes"),
        (("--from-bench", "x", "--shape", "mixed:tp1"), "--shape 'mixed:tp1': expected ROLE:tpN:dpM"),
        ((), "give an engine to fit"),
        (("--target", "u", "--from-ledger", "local/single", "--shape", "mixed:tp1:dp1"),
         "give one engine source"),
    ],
)  # fmt: skip
def test_calibrate_refuses_what_it_cannot_fit(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    done = servekit_inproc("advise", "calibrate", "--out", str(tmp_path), *args)
    one_line_error(done, says)


def test_calibrate_from_a_folder_bench_did_not_write(tmp_path: Path) -> None:
    done = servekit_inproc(
        "advise", "calibrate", "--out", str(tmp_path / "cal"), "--from-bench", str(tmp_path),
        "--shape", "mixed:tp1:dp1",
    )  # fmt: skip
    one_line_error(done, "no bench.json")
    assert not (tmp_path / "cal" / "calibration.json").exists()  # nothing half-written


@pytest.mark.slow
def test_write_puts_the_best_derived_layout_into_the_catalog(cal: Path, tmp_path: Path) -> None:
    """Prefill-heavy traffic on 3 nodes: 2p1d (derived from 1p1d) beats 1p1d and 1p2d."""
    import shutil

    from servekit.catalog import load, packaged_catalog

    src, mine = packaged_catalog(), tmp_path / "catalog"
    for part in ("a3/profiles", "a3/deepseekv4-flash/1p1d"):
        shutil.copytree(src / part, mine / part)
    done = servekit_inproc(
        "advise", "--family", "a3/deepseekv4-flash", "--nodes", "3", "--devices-per-node", "16",
        "--calibration", str(cal), "--isl", "8000", "--osl", "16", "--rate", "12",
        "--requests", "60", "--slo", "ttft=3000", "--catalog", str(mine), "--write",
        env={"COLUMNS": "220"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "best: a3/deepseekv4-flash/2p1d" in done.stdout
    written = mine / "a3/deepseekv4-flash/2p1d/layout.yaml"
    assert f"wrote {written}" in done.stdout.replace("\n", "")
    layout = load("a3/deepseekv4-flash/2p1d", mine).layout
    assert layout.provenance.derived_from and "1p1d" in layout.provenance.derived_from
    assert [e.role for e in layout.engines] == ["prefill", "prefill", "decode"]
