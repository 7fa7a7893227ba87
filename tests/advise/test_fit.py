"""The fits recover the engine model from observations of it, and say when they cannot."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from servekit.advise import fit_decode, fit_prefill, fit_transfer
from servekit.advise.fit import chunk_schedule, median_features, nnls, saturation
from servekit.advise.model import DecodeFit, PrefillFit
from servekit.advise.observe import DecodeObs, PrefillObs
from servekit.errors import UsageError


def ttft(prompts: tuple[int, ...], cached: tuple[int, ...], a: float, b: float, q: float,
         chunk: int) -> PrefillObs:  # fmt: skip
    steps, tokens, area = median_features(PrefillObs(prompts, cached, 0.0, ""), chunk)
    return PrefillObs(prompts, cached, a * steps + b * tokens + q * area, "truth")


LADDER = [((n,), (0,)) for n in (64, 512, 2048, 8192, 32768)] + [
    ((2048,) * 4, (0,) * 4),
    ((8192,), (4096,)),
]


def test_the_prefill_fit_recovers_overhead_rate_and_chunk() -> None:
    obs = [ttft(p, c, 0.02, 1.3793e-4, 0.0, 8192) for p, c in LADDER]
    fit = fit_prefill(obs)
    assert fit.chunk_tokens == 8192
    assert fit.overhead_s == pytest.approx(0.02, rel=1e-6)
    assert fit.per_token_s == pytest.approx(1.3793e-4, rel=1e-6)
    assert fit.rms_error_pct < 1e-6 and fit.max_prompt_measured == 32768


def test_prefix_hits_cost_only_their_uncached_tokens() -> None:
    cold = ttft((4096,), (0,), 0.01, 1e-4, 0.0, 8192)
    hot = ttft((4096,), (3072,), 0.01, 1e-4, 0.0, 8192)
    assert hot.ttft_s == pytest.approx(0.01 + 1024 * 1e-4)
    assert cold.ttft_s == pytest.approx(0.01 + 4096 * 1e-4)


def test_the_chunk_schedule_is_the_engines() -> None:
    # two 6000-token prompts, 8192 tokens a step: the first ends in step 1, the second in 2
    first, second = chunk_schedule((6000, 6000), (0, 0), 8192)
    assert first == (1, 8192, 6000 * 6000 + 2192 * 2192)
    assert second[0] == 2 and second[1] == 12000


@settings(max_examples=40, deadline=None)
@given(
    a=st.floats(1e-4, 0.1),
    b=st.floats(1e-6, 1e-3),
    q=st.sampled_from([0.0, 1e-9, 1e-8]),
    chunk=st.sampled_from([2048, 8192, 16384]),
)
def test_any_model_of_the_form_is_recovered(a: float, b: float, q: float, chunk: int) -> None:
    obs = [ttft(p, c, a, b, q, chunk) for p, c in LADDER]
    fit = fit_prefill(obs)
    for o in obs:
        steps, tokens, area = median_features(o, fit.chunk_tokens)
        pred = fit.overhead_s * steps + fit.per_token_s * tokens + fit.quadratic_s * area
        assert pred == pytest.approx(o.ttft_s, rel=1e-3)


def test_one_prefill_observation_is_refused_in_one_line() -> None:
    with pytest.raises(UsageError, match="two or more prompt lengths"):
        fit_prefill([PrefillObs((512,), (0,), 0.1, "x")])


def step(b: float, ctx: float) -> float:
    return 0.02484 * b**0.45 + 2e-8 * b * ctx


def dobs(b: int, ctx: float, ttft: float = 0.05, osl: int = 128) -> DecodeObs:
    return DecodeObs(b, ctx, step(b, ctx), 2.89, ttft, osl, "truth")


def test_the_decode_fit_separates_batch_from_context() -> None:
    obs = [dobs(b, 192) for b in (1, 2, 4, 8, 16, 32)] + [dobs(1, 32768 + 64)]
    fit = fit_decode(obs, max_running=32)
    assert fit.per_context_token_s == pytest.approx(2e-8, rel=1e-6)
    for b in (1, 3, 8, 24, 32):  # between measured batches: the local power law is exact here
        assert fit.step_s(b) == pytest.approx(0.02484 * b**0.45, rel=1e-6)
    assert fit.acceptance_length == pytest.approx(2.89)


def test_beyond_the_measured_batch_the_last_power_law_goes_on() -> None:
    fit = DecodeFit(points=((1, 0.02484), (4, 0.04635)), per_context_token_s=0.0,
                    acceptance_length=2.89, max_running=16, observations=2, rms_error_pct=0)  # fmt: skip
    k = math.log(0.04635 / 0.02484) / math.log(4)
    assert fit.step_s(16) == pytest.approx(0.04635 * 4**k)


def test_a_saturated_point_counts_as_the_largest_batch_that_ran() -> None:
    obs = [dobs(b, 192) for b in (1, 4, 16, 32)]
    waited = DecodeObs(64, 192, step(32, 192), 2.89, 10.0, 128, "waited")  # TTFT of a queue
    assert saturation([*obs, waited]) == 32
    fit = fit_decode([*obs, waited], None)
    assert fit.max_running == 32 and fit.max_batch_measured == 32


def test_the_transfer_is_what_a_pair_adds() -> None:
    prefill = PrefillFit(overhead_s=0.02, per_token_s=1e-4, quadratic_s=0.0, chunk_tokens=8192,
                         max_prompt_measured=8192, observations=5, rms_error_pct=0.0)  # fmt: skip
    decode = DecodeFit(points=((1, 0.025),), per_context_token_s=0.0, acceptance_length=1.0,
                       max_running=8, observations=1, rms_error_pct=0.0)  # fmt: skip
    pair = [
        PrefillObs((n,), (0,), 0.02 + n * 1e-4 + 0.025 + 0.004 + n * 3e-6, "pair")
        for n in (512, 2048, 8192)
    ]
    fit = fit_transfer(pair, prefill, decode)
    assert fit.overhead_s == pytest.approx(0.004, rel=1e-6)
    assert fit.per_token_s == pytest.approx(3e-6, rel=1e-6)


def test_nnls_never_returns_a_negative_coefficient() -> None:
    x = np.array([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]])
    y = np.array([3.0, 2.0, 1.0])  # a falling line: the slope would be -1
    coef = nnls(x, y)
    assert (coef >= 0).all() and coef[1] == 0.0


def test_the_chunk_is_read_off_a_decoding_streams_gaps() -> None:
    from servekit.advise.calibrate import chunk_from_gaps

    prefill = PrefillFit(overhead_s=0.02, per_token_s=1.38e-4, quadratic_s=0.0, chunk_tokens=65536,
                         max_prompt_measured=32768, observations=5, rms_error_pct=1.0)  # fmt: skip
    chunk_s = 0.02 + 8192 * 1.38e-4 + 0.025  # one 8192-token chunk beside one decode step
    gaps = [0.025, 0.03, chunk_s, chunk_s, chunk_s, 0.6]  # the last chunk is partial
    assert chunk_from_gaps(gaps, 4.6, 32768, prefill, 0.025) == 8192
    assert chunk_from_gaps([0.025, 4.6], 4.6, 32768, prefill, 0.025) is None  # one chunk
    assert chunk_from_gaps([], 0.0, 32768, prefill, 0.025) is None


def test_a_step_measured_while_the_host_was_busy_does_not_bend_the_curve_down() -> None:
    from servekit.advise.fit import monotone

    assert monotone([9.4, 100.9, 45.6, 85.5, 66.0, 52.4]) == pytest.approx(
        [9.4, 70.08, 70.08, 70.08, 70.08, 70.08]
    )
    assert monotone([1.0, 2.0, 3.0]) == [1.0, 2.0, 3.0]
