"""Latency and capacity profiles: the numbers that make a simulated engine slow or fast.

A profile is data (a YAML file in ``profiles/`` or an inline mapping in a spec),
so a calibration is reviewed like any other change and every figure produced
from it can say which profile, and that it was simulated.
"""

from __future__ import annotations

import bisect
from functools import cache
from importlib import resources
from typing import Any

from pydantic import Field, ValidationError, model_validator

from servekit import safeyaml
from servekit.errors import UsageError, first_error
from servekit.vocabulary import StrictModel

PROFILE_PACKAGE = "servekit.sim.profiles"


class Profile(StrictModel):
    """How one simulated engine spends (virtual) time and KV memory."""

    name: str
    label: str = Field(default="simulated", description="shown beside every figure from it")
    description: str = ""
    block_size: int = Field(default=16, ge=1, description="tokens per KV block")
    kv_capacity_tokens: int = Field(default=1_048_576, ge=1, description="KV cache size")
    enable_prefix_caching: bool = True
    max_num_seqs: int = Field(default=256, ge=1, description="running sequences per step")
    max_num_batched_tokens: int = Field(default=8192, ge=1, description="token budget per step")
    prefill_overhead_s: float = Field(default=0.0, ge=0, description="per step with prefill")
    prefill_per_token_s: float = Field(default=0.0, ge=0, description="per uncached token")
    prefill_quadratic_s: float = Field(
        default=0.0, ge=0, description="per chunk token x context position (attention)"
    )
    decode_step_s: tuple[tuple[int, float], ...] = Field(
        default=((1, 0.0),),
        description="(running batch size, seconds per decode step), interpolated linearly",
    )
    decode_per_context_token_s: float = Field(
        default=0.0,
        ge=0,
        description="per decode step, per token of context the decoding sequences hold (attention reads)",
    )
    num_speculative_tokens: int = Field(default=0, ge=0)
    acceptance_length: float = Field(default=1.0, ge=1.0, description="tokens per decode step")
    kv_bytes_per_token: int = Field(default=0, ge=0)
    kv_transfer_bandwidth_bytes_per_s: float = Field(default=0.0, ge=0, description="0: instant")
    kv_transfer_overhead_s: float = Field(default=0.0, ge=0)
    kv_hold_timeout_s: float = Field(
        default=480.0, gt=0, description="prefilled KV kept for a decoder this long"
    )
    finished_lag_s: float = Field(
        default=0.0,
        ge=0,
        description="request_success counts a request this long after its last token "
        "(vLLM records a request's metrics after it streamed)",
    )
    answer_tokens: tuple[int, int] = Field(
        default=(12, 40), description="natural length range of pseudo-text answers"
    )

    @model_validator(mode="after")
    def _check(self) -> Profile:
        if not self.decode_step_s:
            raise ValueError("decode_step_s needs at least one (batch, seconds) point")
        sizes = [b for b, _ in self.decode_step_s]
        if sizes != sorted(set(sizes)) or sizes[0] < 1:
            raise ValueError("decode_step_s batch sizes must be >= 1 and strictly increasing")
        if self.acceptance_length > self.num_speculative_tokens + 1:
            raise ValueError("acceptance_length cannot exceed num_speculative_tokens + 1")
        lo, hi = self.answer_tokens
        if not 1 <= lo <= hi:
            raise ValueError("answer_tokens must be (min, max) with 1 <= min <= max")
        return self

    @property
    def num_blocks(self) -> int:
        return max(1, self.kv_capacity_tokens // self.block_size)

    @property
    def zero_time(self) -> bool:
        """True when no step ever costs time (the engine then runs batches inline)."""
        return (
            self.prefill_overhead_s == 0
            and self.prefill_per_token_s == 0
            and self.prefill_quadratic_s == 0
            and all(s == 0 for _, s in self.decode_step_s)
            and self.decode_per_context_token_s == 0
        )

    def decode_step(self, batch: int, context_tokens: int = 0) -> float:
        """Seconds of one decode step with ``batch`` running sequences.

        ``context_tokens`` is the sum of their context lengths: a decode step
        reads every cached token once, so long contexts slow each step down
        even at the same batch size.
        """
        return (
            _interpolate(self.decode_step_s, batch)
            + self.decode_per_context_token_s * context_tokens
        )

    def prefill_chunk(self, tokens: int, context_end: int) -> float:
        """Seconds to prefill ``tokens`` ending at position ``context_end`` (no overhead)."""
        return tokens * (self.prefill_per_token_s + self.prefill_quadratic_s * context_end)

    def transfer_time(self, tokens: int) -> float:
        """Seconds to pull the KV of ``tokens`` prompt tokens from a prefill instance."""
        if self.kv_transfer_bandwidth_bytes_per_s <= 0:
            return self.kv_transfer_overhead_s
        nbytes = tokens * self.kv_bytes_per_token
        return self.kv_transfer_overhead_s + nbytes / self.kv_transfer_bandwidth_bytes_per_s


def _interpolate(points: tuple[tuple[int, float], ...], x: int) -> float:
    """Piecewise-linear through ``points``; flat below the first, linear past the last."""
    if len(points) == 1 or x <= points[0][0]:
        return points[0][1]
    sizes = [p[0] for p in points]
    i = bisect.bisect_left(sizes, x)
    if i >= len(points):
        (x0, y0), (x1, y1) = points[-2], points[-1]
    else:
        (x0, y0), (x1, y1) = points[i - 1], points[i]
    return max(0.0, y0 + (y1 - y0) * (x - x0) / (x1 - x0))


def builtin_profile_names() -> tuple[str, ...]:
    """Names of the profiles shipped in ``servekit/sim/profiles``."""
    root = resources.files(PROFILE_PACKAGE)
    return tuple(
        sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))
    )


@cache
def load_profile(name: str) -> Profile:
    """A built-in profile by name; UsageError naming the choices when unknown."""
    names = builtin_profile_names()
    if name not in names:
        raise UsageError(f"profile: unknown profile {name!r}; choose one of {', '.join(names)}")
    text = resources.files(PROFILE_PACKAGE).joinpath(f"{name}.yaml").read_text()
    where = f"profile {name}"
    return profile_from_mapping(safeyaml.compose(text, where)[1], where=where)


def profile_from_mapping(data: Any, where: str = "profile") -> Profile:
    """Validate a mapping as a Profile; errors become one UsageError line."""
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        loc, msg = first_error(exc)
        raise UsageError(f"{where}: field {loc}: {msg}") from exc
