"""The autoscaler's computing part (issue 41 item 4), on a fake clock and synthetic load.

A synthetic deployment answers the controller: decode engines whose time per
output token grows with the streams each runs (``TPOT = 20 ms + 4 ms x
streams``: 20 streams fit a 100 ms objective), prefill engines that get through
8,000 prompt tokens per busy second, and new engines that take a minute to
start. The load ramps up 4x and back down; the desired counts must follow it,
within the rate limits, never below one engine per role.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import pytest

from servekit.proxy.autoscale import (
    DecodeModel,
    Limits,
    Objectives,
    PrefillModel,
    RoleScaler,
    RoleSignals,
    Stabiliser,
)

OBJ = Objectives(ttft_s=2.0, tpot_s=0.1, target=0.8)
LIMITS = Limits(min_replicas=1, max_replicas=16, up_window_s=15, down_window_s=300,
                up_period_s=30, up_step=1.0, down_period_s=60)  # fmt: skip
START_S = 60.0  # a new engine serves this long after it was asked for
TICK_S = 5.0


def tpot(streams: float) -> float:
    return 0.02 + 0.004 * streams


def load(t: float, low: float) -> float:
    """Low until 600 s, up 4x by 900 s, held to 1800 s, back down by 2100 s, low to 3600 s."""
    if t < 600:
        return low
    if t < 900:
        return low * (1 + 3 * (t - 600) / 300)
    if t < 1800:
        return 4 * low
    if t < 2100:
        return low * (4 - 3 * (t - 1800) / 300)
    return low


@dataclass
class Fleet:
    """Engines of one role: those asked for start after START_S; removed ones go at once."""

    ready: int = 1
    starting: list[float] = field(default_factory=list)

    def follow(self, now: float, desired: int) -> None:
        self.ready += sum(1 for t in self.starting if t <= now)
        self.starting = [t for t in self.starting if t > now]
        total = self.ready + len(self.starting)
        if desired > total:
            self.starting += [now + START_S] * (desired - total)
        elif desired < total:  # what has not started is cancelled first
            cancel = min(total - desired, len(self.starting))
            self.starting = self.starting[: len(self.starting) - cancel]
            self.ready -= total - desired - cancel


def run_ramp() -> dict[str, list[tuple[float, int, float]]]:
    """(time, desired, served latency / objective) per role, every tick for an hour."""
    rng = random.Random(7)
    decode = RoleScaler("decode", LIMITS, OBJ, start=1)
    prefill = RoleScaler("prefill", LIMITS, OBJ, start=1)
    fleets = {"decode": Fleet(), "prefill": Fleet()}
    trace: dict[str, list[tuple[float, int, float]]] = {"decode": [], "prefill": []}
    t = 0.0
    while t < 3600:
        streams = load(t, 16.0)  # decode streams in flight
        per = streams / fleets["decode"].ready
        for _ in range(10):  # streams that finished in the tick, each on a busier or idler engine
            s = per * rng.uniform(0.8, 1.2)
            decode.decode.add(s, tpot(s), OBJ.tpot_s)
        sig = RoleSignals(fleets["decode"].ready, in_flight=streams, latency_p90=tpot(per) * 1.05)
        need = decode.need(sig)
        late = need.pressure > 1
        d = decode.decide(
            t, need.engines, fleets["decode"].ready, late=late, hold=need.why == "hold"
        )
        trace["decode"].append((t, d, tpot(per) / OBJ.tpot_s))
        arrivals = load(t, 6000.0)  # prompt tokens a second
        busy = min(1.0, arrivals / (8000.0 * fleets["prefill"].ready))
        prefill.prefill.add(8000.0 * busy * fleets["prefill"].ready * TICK_S,
                            busy * fleets["prefill"].ready * TICK_S)  # fmt: skip
        sig = RoleSignals(fleets["prefill"].ready, in_flight=1, arrivals_s=arrivals,
                          backlog=arrivals * 0.2)  # fmt: skip
        need = prefill.need(sig)
        p = prefill.decide(t, need.engines, fleets["prefill"].ready, late=False,
                           hold=need.why == "hold")  # fmt: skip
        trace["prefill"].append((t, p, busy))
        fleets["decode"].follow(t, d)
        fleets["prefill"].follow(t, p)
        t += TICK_S
    return trace


def at(trace: list[tuple[float, int, float]], t: float) -> int:
    return next(d for s, d, _ in trace if s >= t)


@pytest.mark.parametrize("role", ["decode", "prefill"])
def test_desired_follows_a_4x_ramp_up_and_down_within_the_rate_limits(role: str) -> None:
    trace = run_ramp()[role]
    counts = [d for _, d, _ in trace]
    assert min(counts) >= 1
    trough, peak = at(trace, 590), at(trace, 1790)
    assert trough in (1, 2) and peak in (4, 5)  # 16 -> 64 streams at 16 per engine (20 x 0.8)
    assert at(trace, 3590) == trough  # and back
    for i, (t, d, _) in enumerate(trace):
        before_up = [c for s, c, _ in trace[:i] if s >= t - LIMITS.up_period_s] or [d]
        assert d <= min(before_up) + max(1, math.ceil(min(before_up)))  # at most doubles / 30 s
        before_down = [c for s, c, _ in trace[:i] if s >= t - LIMITS.down_period_s] or [d]
        assert d >= max(before_down) - 1  # at most one engine fewer / 60 s
    # the load fell at 1800-2100 s: nothing goes before the down window saw no higher need
    assert at(trace, 1800 + LIMITS.down_window_s - TICK_S) == peak
    if role == "decode":  # once the engines started, the objective is met at the peak
        served = [lat for s, _, lat in trace if 1200 <= s <= 1800]
        assert max(served) <= 1.0


def test_a_spike_shorter_than_the_up_window_adds_nothing() -> None:
    stable = Stabiliser(LIMITS, desired=2)
    needs = [2] * 6 + [9] * 2 + [2] * 10  # ten seconds at 9, every five seconds
    got = [stable.update(i * 5.0, n) for i, n in enumerate(needs)]
    assert got == [2] * len(needs)
    stable = Stabiliser(LIMITS, desired=2)
    needs = [2] * 6 + [9] * 12
    got = [stable.update(i * 5.0, n) for i, n in enumerate(needs)]
    assert got[8] == 2 and got[9] == 4  # need 9 for the whole 15 s window: up, doubled at most
    assert got[15] == 4 and got[16] == 8  # doubled again once 30 s passed since the last step
    assert got[-1] == 8


def test_never_below_one_engine_nor_above_the_bound() -> None:
    stable = Stabiliser(Limits(down_window_s=0, down_period_s=1), desired=3)
    assert [stable.update(float(t), 0) for t in range(1, 6)][-1] == 1
    top = Stabiliser(Limits(max_replicas=4, up_window_s=0, up_period_s=1), desired=1)
    assert max(top.update(float(t), 100) for t in range(10)) == 4


def test_the_decode_model_recovers_the_capacity_from_a_line_of_samples() -> None:
    model = DecodeModel()
    assert model.capacity(0.1) is None  # nothing known: the role holds its count
    model.add(4.0, tpot(4.0), 0.1)
    first = model.capacity(0.1)
    assert first is not None and first < 20  # through the origin: below the truth (a > 0)
    rng = random.Random(1)
    for _ in range(60):
        s = rng.uniform(2, 30)
        model.add(s, tpot(s) * rng.uniform(0.97, 1.03), 0.1)
    assert model.capacity(0.1) == pytest.approx(20, rel=0.1)
    capped = RoleScaler("decode", LIMITS, OBJ, 1)
    capped.decode = model
    need = capped.need(RoleSignals(2, in_flight=32, kv_limit=10))  # the KV holds 10 streams
    assert need.capacity == pytest.approx(8) and need.engines == pytest.approx(5)


def test_a_missed_objective_asks_for_one_engine_more_and_weighs_the_need() -> None:
    scaler = RoleScaler("decode", Limits(up_window_s=0), OBJ, 2, decode_seed=100)
    need = scaler.need(RoleSignals(2, in_flight=10, latency_p90=0.2))
    assert need.why == "slo" and need.pressure == 2.0
    assert need.engines == pytest.approx(10 / 80 * 2)
    assert scaler.decide(0.0, need.engines, 2, late=True, hold=False) == 3
    idle = scaler.need(RoleSignals(2, in_flight=0, latency_p90=0.2))
    assert idle.why == "load" and idle.pressure == 1.0  # no work in flight: no pressure


def test_prefill_keeps_up_with_arrivals_and_clears_the_backlog_within_the_ttft() -> None:
    model = PrefillModel()
    model.add(tokens=10.0, busy_s=0.01)  # too little work to say anything yet
    assert model.capacity() is None
    model.add(tokens=39_990.0, busy_s=4.99)  # gathered with the first: 8,000 a busy second
    scaler = RoleScaler("prefill", LIMITS, OBJ, 1)
    scaler.prefill = model
    keep_up = scaler.need(RoleSignals(1, in_flight=1, arrivals_s=12_800.0))
    assert keep_up.engines == pytest.approx(2.0)  # 12,800 / (8,000 x 0.8)
    backlog = scaler.need(RoleSignals(1, in_flight=4, arrivals_s=0.0, backlog=48_000.0))
    assert backlog.engines == pytest.approx(3.0)  # 48,000 tokens cleared in 2 s at 8,000/s


@pytest.mark.slow
def test_the_proxy_exports_desired_replicas_from_its_own_traffic_on_the_simulator() -> None:
    """Six slow streams on one decoder sized for two: the proxy asks for more decoders,
    then, the streams done, for one again; the measured capacities are exported."""
    import asyncio
    from functools import partial

    import aiohttp

    from .test_drain import SLOW, deployment

    fast = {"autoscale": True, "autoscale_interval_s": 0.1, "scale_up_window_s": 0.0,
            "scale_down_window_s": 0.0, "scale_up_period_s": 0.1, "scale_down_period_s": 0.1,
            "decode_capacity": 2, "scale_up_step": 10.0}  # fmt: skip

    async def desired(client: aiohttp.ClientSession, url: str) -> dict[str, float]:
        async with client.get(url + "/metrics") as r:
            text = await r.text()
        return {line.split('"')[1]: float(line.split()[-1]) for line in text.splitlines()
                if line.startswith("servekit_desired_replicas{")}  # fmt: skip

    async def scenario() -> None:
        prefill = {"name": "prefill-30ms", "prefill_overhead_s": 0.03}
        async with deployment(1, 1, decode_profile=SLOW, prefill_profile=prefill, **fast) as d:
            assert await desired(d.client, d.proxy.url) == {"decode": 1.0, "prefill": 1.0}
            d0 = d.sim.endpoints["d0"]
            d0.set_faults({"hang": True})  # six streams held in flight on the one decoder
            running = [asyncio.ensure_future(d.ask(i, f"a{i}", max_tokens=8)) for i in range(6)]
            read = partial(desired, d.client, d.proxy.url)
            await wait_until_async(read, {"decode": 4.0})  # 6 streams / (2 x 0.8) engines
            d0.set_faults({"hang": False})
            await asyncio.gather(*running)
            await wait_until_async(read, {"decode": 1.0})  # done: one again
            async with d.client.get(d.proxy.url + "/metrics") as r:
                text = await r.text()
            assert 'servekit_autoscale_capacity{role="prefill"}' in text  # measured
            assert 'servekit_autoscale_capacity{role="decode"}' in text

    asyncio.run(scenario())


async def wait_until_async(read: object, want: dict[str, float], bound_s: float = 10.0) -> None:
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while True:
        got = await read()  # type: ignore[operator]
        if all(got.get(k) == v for k, v in want.items()):
            return
        assert loop.time() < deadline, f"never happened: {want}, last {got}"
        await asyncio.sleep(0.05)
