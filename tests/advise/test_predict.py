"""Predictions: the simulator's engines in virtual time, routed like the proxy, on a fit."""

from __future__ import annotations

import asyncio
import time

import pytest

from servekit.advise import Calibration, EngineFit, Slo, predict_layout
from servekit.advise.candidates import Candidate, Pool
from servekit.advise.model import DecodeFit, PrefillFit, TransferFit
from servekit.advise.predict import block_hashes, profile_of
from servekit.advise.shapes import Shape
from servekit.bench import TraceRequest
from servekit.sim import Seq, VirtualClock, VirtualStall, run_virtual, virtual_engine


def fit(
    name: str = "e", shapes: tuple[str, ...] = ("mixed:tp1:dp1",), running: int = 8
) -> EngineFit:
    return EngineFit(
        name=name, shapes=shapes, engine="sim", sources=(), block_size=16,
        kv_capacity_tokens=1 << 20,
        prefill=PrefillFit(overhead_s=0.01, per_token_s=1e-4, quadratic_s=0.0, chunk_tokens=2048,
                           max_prompt_measured=4096, observations=5, rms_error_pct=1.0),
        decode=DecodeFit(points=((1, 0.01), (8, 0.03)), per_context_token_s=0.0,
                         acceptance_length=1.0, max_running=running, observations=4,
                         rms_error_pct=1.0),
    )  # fmt: skip


def cal(transfer: float = 0.0) -> Calibration:
    return Calibration(
        created="test",
        engines=(fit(),),
        transfer=TransferFit(overhead_s=transfer, per_token_s=0.0, observations=1),
    )


def cand(*pools: tuple[str, int]) -> Candidate:
    return Candidate(
        name="t/" + "-".join(f"{r}{n}" for r, n in pools), origin="test", nodes=1,
        pools=tuple(Pool(r, Shape(r, 1, 1), n) for r, n in pools),  # type: ignore[arg-type]
        prefix_caching=True, max_model_len=8192,
    )  # fmt: skip


def requests(n: int, gap: float, isl: int = 1000, osl: int = 11) -> list[TraceRequest]:
    return [TraceRequest(i + 1, i * gap, isl, osl) for i in range(n)]


def test_a_lone_request_takes_exactly_the_models_time() -> None:
    pred = predict_layout(cand(("mixed", 1)), cal(), requests(1, 1.0), Slo())
    # prefill 10 ms + 1000 x 0.1 ms; then 10 decode steps of 10 ms
    assert pred.ttft_ms["p50"] == pytest.approx(110.0)
    assert pred.tpot_ms["p50"] == pytest.approx(10.0)
    assert pred.errors == 0 and pred.goodput > 0


def test_pd_adds_the_hand_off_and_one_decode_step_to_ttft() -> None:
    pd = cand(("prefill", 1), ("decode", 1))
    pred = predict_layout(pd, cal(transfer=0.05), requests(1, 1.0), Slo())
    assert pred.ttft_ms["p50"] == pytest.approx(110.0 + 50.0 + 10.0)


def test_two_engines_serve_an_overload_one_cannot() -> None:
    load = requests(80, 0.02)  # 50/s of 110 ms prefills: one engine queues, two barely
    one = predict_layout(cand(("mixed", 1)), cal(), load, Slo(ttft_ms=500))
    two = predict_layout(cand(("mixed", 2)), cal(), load, Slo(ttft_ms=500))
    assert two.goodput > one.goodput and two.ttft_ms["p90"] < one.ttft_ms["p90"]
    assert not one.meets_slo


def test_a_request_longer_than_the_context_fails_as_the_engine_refuses_it() -> None:
    pred = predict_layout(cand(("mixed", 1)), cal(), requests(2, 0.1, isl=9000), Slo())
    assert pred.errors == 2


def test_shared_prefixes_hit_the_prefix_cache() -> None:
    shared = [TraceRequest(i + 1, i * 1.0, 2048, 2, (7, 8, 9 + i)) for i in range(3)]
    own = [TraceRequest(i + 1, i * 1.0, 2048, 2) for i in range(3)]
    hot = predict_layout(cand(("mixed", 1)), cal(), shared, Slo())
    cold = predict_layout(cand(("mixed", 1)), cal(), own, Slo())
    assert cold.ttft_ms["p50"] == pytest.approx(10.0 + 204.8)
    assert hot.ttft_ms["p50"] == pytest.approx(10.0 + 102.4)  # 1024 of 2048 tokens cached


def test_block_hashes_are_equal_only_for_equal_prefixes() -> None:
    a = block_hashes(TraceRequest(1, 0, 1500, 1, (1, 2)), 0, 16, 512)
    b = block_hashes(TraceRequest(2, 0, 1500, 1, (1, 3)), 1, 16, 512)
    assert len(a) == 1500 // 16
    assert a[:32] == b[:32] and a[32] != b[32]


def test_extrapolation_is_flagged() -> None:
    pred = predict_layout(cand(("mixed", 1)), cal(), requests(20, 0.001, isl=6000), Slo())
    assert any("beyond the 4,096 calibrated" in f for f in pred.flags)
    no_transfer = Calibration(created="t", engines=(fit(),))
    pd = predict_layout(cand(("prefill", 1), ("decode", 1)), no_transfer, requests(1, 1), Slo())
    assert any("KV hand-off not measured" in f for f in pd.flags)


def test_the_fitted_profile_is_the_fit() -> None:
    prof = profile_of(fit(), prefix_caching=False)
    assert prof.decode_step(1) == pytest.approx(0.01)
    assert prof.decode_step(8) == pytest.approx(0.03)
    assert prof.max_num_seqs == 8 and prof.max_num_batched_tokens == 2048
    assert not prof.enable_prefix_caching


def test_virtual_time_costs_no_wall_time() -> None:
    prof = profile_of(fit(), prefix_caching=True)

    async def main() -> float:
        clock = VirtualClock()
        engine = virtual_engine(prof, clock)
        engine.start()
        await clock.sleep(3600.0)  # an hour of nothing
        seq = Seq(100, [], ["x"] * 2, "length", clock.now(), clock.now())
        engine.submit(seq)
        await seq.done
        await engine.stop()
        return clock.now()

    t0 = time.monotonic()
    assert run_virtual(main) == pytest.approx(3600.0 + 0.01 + 0.01 + 0.01)
    assert time.monotonic() - t0 < 5


def test_a_simulation_that_waits_on_nothing_says_so() -> None:
    async def main() -> None:
        await asyncio.get_running_loop().create_future()  # nobody will ever set it

    with pytest.raises(VirtualStall):
        run_virtual(main)
