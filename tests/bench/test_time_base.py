"""One time base for the decode figures: a simulated engine's seconds are scaled to the client's.

A simulated engine at speed S reports ``vllm:request_decode_time_seconds`` in
simulated seconds (S times the wall time). The single-stream figure takes the
client's window when the frames came apart and the engine's when they were
merged; both must give the same tok/s for the same stream, or one cluster
measured two ways reads S times apart (113.5 vs 1,150 tok/s at 10x, issue 22).
"""

from __future__ import annotations

from typing import Any

import pytest

from servekit.bench.workloads.single_stream import engine_time_scale, shot_figures
from servekit.client import RequestRecord
from servekit.deployment import Deployment

WALL_MS = 50.0  # the stream's first to last token, on the client's clock
TOKENS = 11


class Sampled:
    """What the sampler saw: no drafts, one request, the engine's decode time."""

    def __init__(self, decode_s: float) -> None:
        self.samples = [object()]
        self._decode_s = decode_s

    def counter_delta(self, name: str) -> float | None:
        return 1.0 if name == "vllm:request_success" else None

    def histogram_sum_delta(self, name: str) -> float:
        return self._decode_s

    def max_running(self) -> int:
        return 1


def record(merged: bool) -> RequestRecord:
    start = 1_000_000_000
    step = int(WALL_MS * 1e6 / (TOKENS - 1))
    times = [start] + [start + (WALL_MS * 1e6 if merged else i * step) for i in range(1, TOKENS)]
    return RequestRecord.model_validate(
        {
            "kind": "completion", "method": "POST", "url": "http://x/v1/completions",
            "request_body": "{}", "stream": True, "status": 200, "t_start_ns": start - 10**6,
            "t_end_ns": start + int(WALL_MS * 1e6), "token_times_ns": tuple(int(t) for t in times),
            "usage": {"prompt_tokens": 4, "completion_tokens": TOKENS, "total_tokens": 15},
        }
    )  # fmt: skip


@pytest.mark.parametrize("speed", [1.0, 10.0, 50.0])
def test_merged_and_separate_frames_give_one_figure_at_any_speed(speed: float) -> None:
    engine_s = WALL_MS / 1000 * speed  # the engine's own (simulated) decode time
    apart: dict[str, Any] = shot_figures(record(False), Sampled(engine_s), time_scale=speed)  # type: ignore[arg-type]
    merged: dict[str, Any] = shot_figures(record(True), Sampled(engine_s), time_scale=speed)  # type: ignore[arg-type]
    assert apart["window_source"].startswith("client:")
    assert merged["window_source"].startswith("engine:")
    assert merged["tok_per_s"] == pytest.approx(apart["tok_per_s"], rel=0.01)
    assert apart["tok_per_s"] == pytest.approx((TOKENS - 1) * 1000 / WALL_MS, rel=0.01)


def test_the_scale_is_the_simulated_deployments_speed() -> None:
    sim = Deployment(entry_url="http://x", engine="sim", sim_speed=10.0)
    assert engine_time_scale(sim) == 10.0
    assert engine_time_scale(sim.model_copy(update={"sim_speed": None})) == 1.0
    assert engine_time_scale(Deployment(entry_url="http://x", engine="vllm")) == 1.0
