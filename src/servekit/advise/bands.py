"""The error band a prediction carries: what the published campaigns measured.

``bands.json`` (beside this module) holds, per kind of calibration, the
absolute percentage errors the validation campaigns of docs/advise.md measured
(``benchmarks/advise_sim.py``, ``benchmarks/advise_vllm.py``), with the command
and the date that produced them. A prediction is shown with the band of its
calibration's kind: simulated engines, real vLLM engines, or engines servekit
could not identify, which get the real-engine band and say so.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from pydantic import Field

from servekit.vocabulary import ServedBy, StrictModel

BANDS_FILE = "bands.json"


class Band(StrictModel):
    """The measured error of one campaign, per figure (percent)."""

    campaign: str = Field(description="which campaign of docs/advise.md")
    statistic: str = Field(description="what the numbers are, e.g. 'p90 of |error| over 18 cells'")
    goodput_pct: float
    ttft_p90_pct: float
    tpot_p50_pct: float
    median_goodput_pct: float
    median_ttft_p90_pct: float
    median_tpot_p50_pct: float
    cells: int
    command: str
    measured: str


@cache
def bands() -> dict[str, Band]:
    """Every published band by calibration kind (sim, vllm)."""
    text = resources.files("servekit.advise").joinpath(BANDS_FILE).read_text()
    return {k: Band.model_validate(v) for k, v in json.loads(text).items()}


def band_for(kind: ServedBy) -> tuple[Band | None, str]:
    """The band for a calibration kind, and a line saying which one and why."""
    table = bands()
    if kind in table:
        own = table[kind]
        return own, f"{own.campaign} ({own.statistic}; {own.measured})"
    real = table.get("vllm")
    if real is None:
        return None, "no published band for this kind of engine"
    return real, (
        f"{real.campaign}: the real-engine band, the nearest measured (the calibrated "
        "engines were not identified as vLLM or the simulator)"
    )
