"""The options of ``servekit advise`` and ``servekit advise calibrate``: one model each.

Light on purpose (``servekit --help`` imports it): pydantic and the shared
words only. Every check of a flag's value lives here, so a bad flag is one
line naming it before anything is measured or simulated.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Self

from pydantic import Field, model_validator

from servekit.errors import UsageError
from servekit.vocabulary import Startable, StrictModel

_PERCENTILE_NAMES = ("ttft", "tpot")


def parse_percentiles(items: tuple[str, ...]) -> dict[str, float]:
    """['ttft=90,tpot=50'] -> {'ttft': 90.0, 'tpot': 50.0}; one line naming the form otherwise."""
    out = {"ttft": 90.0, "tpot": 50.0}
    for item in (p for text in items for p in text.split(",") if p.strip()):
        name, _, value = item.partition("=")
        try:
            pct = float(value)
        except ValueError:
            pct = -1.0
        if name.strip() not in _PERCENTILE_NAMES or not 0 < pct <= 100 or not math.isfinite(pct):
            raise UsageError(
                f"--percentile {item[:40]}: expected ttft=P or tpot=P with 0 < P <= 100, e.g. ttft=90"
            )
        out[name.strip()] = pct
    return out


class AdviseOptions(StrictModel):
    """``servekit advise``: rank the layouts of a family for a workload and SLOs."""

    family: str | None = Field(
        None, description="<hardware>/<model> whose layouts are ranked, e.g. a3/deepseekv4-flash"
    )
    nodes: int = Field(1, ge=1, le=64, description="nodes available")
    devices_per_node: int | None = Field(
        None, ge=0, le=64, description="accelerators per node (default: the family's)"
    )
    calibration: Path | None = Field(
        None, description="calibration folder written by 'servekit advise calibrate'"
    )
    trace: Path | None = Field(
        None, description="the workload as a trace (Mooncake JSONL or Azure CSV, as bench reads)"
    )
    trace_speed: float = Field(
        1.0, gt=0, le=1e6, allow_inf_nan=False, description="trace seconds per second"
    )
    requests: int | None = Field(
        None, ge=1, le=100_000, description="with --trace: the first N; drawn: how many (300)"
    )
    isl: str | None = Field(
        None, description="drawn prompt lengths: N, uniform:A,B, normal:M,SD, lognormal:MEDIAN,S"
    )
    osl: str | None = Field(None, description="drawn output lengths, the same forms as --isl")
    rate: float | None = Field(
        None, gt=0, le=1e6, allow_inf_nan=False, description="drawn requests per second (Poisson)"
    )
    prefix_share: float = Field(
        0.0, ge=0, le=1, description="share of each drawn prompt shared within its group"
    )
    prefix_groups: int = Field(4, ge=1, le=10_000, description="groups sharing a prefix")
    seed: int = Field(0, ge=0, description="seed of the drawn requests")
    slo: tuple[str, ...] = Field(
        (), description="goodput limits NAME=MS[,NAME=MS]: ttft, tpot, e2el (as bench --slo)"
    )
    percentile: tuple[str, ...] = Field(
        (), description="the percentiles the SLO is judged at (default ttft=90,tpot=50)"
    )
    derive: bool = Field(True, description="also rank layouts derived from the family's PD layouts")
    top: int = Field(10, ge=1, le=1000, description="rows of the ranking shown")
    write: bool = Field(
        False, description="write the best derived layout into --catalog, as 'layouts new' does"
    )
    force: bool = Field(False, description="with --write: replace a layout of that name")
    validate_top: int = Field(
        0,
        ge=0,
        le=20,
        description="run the top K here and print predicted against measured",
        json_schema_extra={"flag": "--validate"},
    )
    validate_engine: Startable = Field(
        "sim", description="what --validate runs: sim (the simulator) or vllm (real engines)"
    )
    validate_speed: float = Field(
        1.0, gt=0, le=100, allow_inf_nan=False, description="--validate sim: simulator speed"
    )
    json_out: Path | None = Field(
        None, description="also write the ranking as JSON", json_schema_extra={"flag": "--json"}
    )
    catalog: Path | None = Field(
        None, description="catalog folder (default: SERVEKIT_CATALOG or the packaged catalog)"
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.family is None:
            raise UsageError("--family: required; e.g. --family a3/deepseekv4-flash")
        if self.calibration is None:
            raise UsageError(
                "--calibration: required; make one with 'servekit advise calibrate' "
                "(docs/advise.md)"
            )
        drawn = (self.isl, self.osl, self.rate)
        if self.trace is not None and any(v is not None for v in drawn):
            raise UsageError("--trace and --isl/--osl/--rate describe the workload twice; give one")
        if self.trace is None and any(v is None for v in drawn):
            raise UsageError(
                "the workload: give --trace FILE, or --isl, --osl and --rate (docs/advise.md)"
            )
        from servekit.bench import parse_slos

        parse_slos(self.slo)
        parse_percentiles(self.percentile)
        return self


class AdviseCalibrateOptions(StrictModel):
    """``servekit advise calibrate``: fit one engine (or a PD pair) from measurements."""

    out: Path = Field(description="calibration folder (calibration.json is added to or made)")
    target: str | None = Field(
        None, description="measure this engine now: a URL, or a layout run by 'servekit up'"
    )
    from_bench: tuple[Path, ...] = Field(
        (), description="fit on these 'servekit bench' result folders instead"
    )
    from_ledger: str | None = Field(
        None, description="fit on the bench results of this layout's newest ledger record"
    )
    shape: tuple[str, ...] = Field(
        (), description="endpoint shapes the engine stands for, ROLE:tpN:dpM (repeatable)"
    )
    name: str | None = Field(None, description="a label for the engine (default: its source)")
    pair: str | None = Field(
        None, description="measure the KV hand-off through this PD pair behind the proxy"
    )
    pair_bench: tuple[Path, ...] = Field(
        (), description="fit the hand-off on these bench folders of a PD pair instead"
    )
    max_batch: int = Field(64, ge=1, le=256, description="largest decode batch measured")
    max_prompt: int = Field(
        32768, ge=64, le=1 << 20, description="longest prompt measured (at most the served context)"
    )
    decode_isl: int = Field(128, ge=1, le=1 << 20, description="prompt tokens of the decode runs")
    decode_osl: int = Field(128, ge=2, le=1 << 16, description="output tokens of the decode runs")
    runs: int = Field(1, ge=1, le=10, description="runs per bench figure")
    catalog: Path | None = Field(None, description="catalog folder for --from-ledger")

    @model_validator(mode="after")
    def _check(self) -> Self:
        sources = [s for s in (self.target, self.from_ledger) if s] + list(self.from_bench[:1])
        if len(sources) > 1:
            raise UsageError("--target, --from-bench and --from-ledger: give one engine source")
        if sources and not self.shape:
            raise UsageError(
                "--shape: say which endpoint shapes this engine stands for, e.g. "
                "--shape prefill:tp4:dp1 (docs/advise.md)"
            )
        if not sources and not (self.pair or self.pair_bench):
            raise UsageError(
                "give an engine to fit (--target, --from-bench, --from-ledger) or a PD pair (--pair)"
            )
        from servekit.advise.shapes import parse_shape

        for text in self.shape:
            parse_shape(text)
        return self
