"""The fitted engine model: what a calibration learned, kept as data with its evidence.

A :class:`Calibration` is written once (``calibration.json`` in the calibration
folder) and read by every prediction. Each :class:`EngineFit` says which
endpoint shapes it stands for, where its numbers came from (the bench results
it was fitted on) and over what range they were measured, so a prediction can
say when it leaves that range. Nothing in it is typed for a piece of hardware.
"""

from __future__ import annotations

import bisect
import math
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from servekit.errors import UsageError, first_error
from servekit.vocabulary import ServedBy, StrictModel, atomic_write_text

CALIBRATION_FILE = "calibration.json"
CalibrationSchema = Literal["servekit.advise.calibration/1"]


class PrefillFit(StrictModel):
    """Prefill time of a chunk schedule: per step ``overhead_s``, per uncached token
    ``per_token_s``, per uncached token and context position ``quadratic_s``."""

    overhead_s: float = Field(ge=0)
    per_token_s: float = Field(ge=0)
    quadratic_s: float = Field(ge=0)
    chunk_tokens: int = Field(ge=1, description="tokens per engine step (max_num_batched_tokens)")
    chunk_source: Literal["probe", "fit"] = Field(
        "fit", description="probe: read off a decoding stream's gaps; fit: the best residual"
    )
    max_prompt_measured: int = Field(ge=1)
    observations: int = Field(ge=1)
    rejected: int = Field(0, ge=0, description="observations left out as outliers")
    rms_error_pct: float = Field(ge=0, description="root mean square of the fit's relative errors")


class DecodeFit(StrictModel):
    """Decode step time: measured ``(batch, seconds)`` at zero context, interpolated in
    log-log (a local power law), plus ``per_context_token_s`` per token of context held."""

    points: tuple[tuple[int, float], ...] = Field(min_length=1)
    per_context_token_s: float = Field(ge=0)
    acceptance_length: float = Field(ge=1.0, description="tokens per step (speculative decoding)")
    max_running: int = Field(ge=1, description="sequences the engine ran at once, observed")
    observations: int = Field(ge=1)
    rms_error_pct: float = Field(ge=0)

    @property
    def max_batch_measured(self) -> int:
        return self.points[-1][0]

    def step_s(self, batch: float) -> float:
        """The base step time at ``batch`` (log-log interpolation, power-law extrapolation)."""
        pts = self.points
        if len(pts) == 1 or batch <= pts[0][0]:
            return pts[0][1]
        sizes = [b for b, _ in pts]
        i = min(max(bisect.bisect_left(sizes, batch), 1), len(pts) - 1)
        (b0, s0), (b1, s1) = pts[i - 1], pts[i]
        if s0 <= 0 or s1 <= 0:
            return max(0.0, s0 + (s1 - s0) * (batch - b0) / (b1 - b0))
        k = math.log(s1 / s0) / math.log(b1 / b0)
        return float(s0 * (batch / b0) ** k)


class TransferFit(StrictModel):
    """KV hand-off from prefill to decode: ``overhead_s + per_token_s x prompt tokens``
    (through the proxy, so its hop is in ``overhead_s``)."""

    overhead_s: float = Field(ge=0)
    per_token_s: float = Field(ge=0)
    observations: int = Field(ge=0, description="0: not measured (taken as no time)")

    def seconds(self, tokens: int) -> float:
        return self.overhead_s + self.per_token_s * tokens


NO_TRANSFER = TransferFit(overhead_s=0.0, per_token_s=0.0, observations=0)


class EngineFit(StrictModel):
    """One measured engine and the endpoint shapes it stands for."""

    name: str = Field(description="a label for this engine, e.g. 'prefill' or 'local/single'")
    shapes: tuple[str, ...] = Field(min_length=1, description="shapes it stands for (ROLE:tpN:dpM)")
    engine: ServedBy = Field(description="what answered the calibration: sim, vllm or external")
    sources: tuple[str, ...] = Field(description="the bench results it was fitted on")
    block_size: int = Field(ge=1)
    kv_capacity_tokens: int = Field(ge=1)
    prefill: PrefillFit
    decode: DecodeFit


class Calibration(StrictModel):
    """Every engine fit of one calibration, and the KV hand-off between roles."""

    schema_version: CalibrationSchema = "servekit.advise.calibration/1"
    created: str
    engines: tuple[EngineFit, ...] = Field(min_length=1)
    transfer: TransferFit = NO_TRANSFER
    notes: tuple[str, ...] = ()

    @property
    def engine_kind(self) -> ServedBy:
        """sim when every engine was simulated, vllm when every one was real vLLM."""
        kinds = {e.engine for e in self.engines}
        return kinds.pop() if len(kinds) == 1 else "external"

    def write(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / CALIBRATION_FILE
        atomic_write_text(path, self.model_dump_json(indent=2) + "\n")
        return path


MAX_CALIBRATION_BYTES = 4 << 20


def read_calibration(path: Path, flag: str = "--calibration") -> Calibration:
    """A calibration folder (or its calibration.json); one line naming the fix otherwise."""
    file = path / CALIBRATION_FILE if path.is_dir() else path
    if not file.is_file():
        raise UsageError(
            f"{flag} {path}: no {CALIBRATION_FILE}; make one with "
            "'servekit advise calibrate --target URL --shape ROLE:tpN:dpM --out DIR'"
        )
    with file.open("rb") as handle:
        data = handle.read(MAX_CALIBRATION_BYTES + 1)
    if len(data) > MAX_CALIBRATION_BYTES:
        raise UsageError(f"{flag} {file}: larger than {MAX_CALIBRATION_BYTES} bytes")
    try:
        return Calibration.model_validate_json(data)
    except ValidationError as exc:
        loc, msg = first_error(exc)
        raise UsageError(f"{flag} {file}: field {loc}: {msg}") from None
