"""How many engines each role needs, from what the proxy measures: the computing part.

Every ``--autoscale-interval`` the proxy turns what it saw (:mod:`servekit.proxy.demand`)
into one need per role, in engines, and a desired count that an HPA or KEDA acts
on (``servekit_desired_replicas{role}``). Per role:

decode (and replica)
    need = streams in flight / (streams one engine serves within ``--slo-tpot``
    x ``--autoscale-target``). The streams one engine serves is measured, not
    profiled: every finished stream gives its time per output token and the
    streams its engine ran meanwhile (time-averaged), and TPOT is fitted as
    ``a + b x streams`` (weighted least squares, newest weighing most; Dynamo's
    profiles show ITL near-linear in the active load), so capacity =
    ``(slo - a) / b``. Before a slope is seen, the bound through the origin
    (``streams x slo / tpot``, lower than the truth when ``a > 0``) is used;
    ``--decode-capacity`` seeds it; an engine's own KV limit
    (``vllm:num_requests_running / vllm:kv_cache_usage_perc``) caps it.
prefill
    need = max(prompt tokens arriving per second / (tokens one engine prefills
    per busy second x target), prompt tokens waiting / (that x ``--slo-ttft``)):
    the arrivals must be kept up with and the backlog cleared within the TTFT
    objective. Tokens per busy second is measured per engine over the window
    (time with at least one prefill in flight), so batching and prefix-cache
    hits count as they happen; ``--prefill-capacity`` seeds it.
both
    a role whose p90 latency (TPOT for decode, TTFT for prefill and replica)
    misses its objective while it has work needs at least one engine more than
    it has, whatever the model says (the model learns from the same samples).

The desired count moves as a Kubernetes HPA's ``behavior`` would (it is what the
HPA is then given, one step at a time): up to the lowest need of the last
``--scale-up-window`` (a shorter spike adds nothing), at most
``max(1, --scale-up-step x count)`` engines per ``--scale-up-period``; down to
the highest need of the last ``--scale-down-window``, at most one engine per
``--scale-down-period``; never below ``--min-replicas`` (1) nor above
``--max-replicas``. Standard library only.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

DECAY = 0.98  # weight kept by older samples per new one (~50 samples of memory)
MIN_SAMPLES = 8  # streams before a fitted slope is trusted
MIN_SPREAD = 0.5  # streams-per-engine spread before a fitted slope is trusted
MIN_BUSY_S = 0.02  # engine-seconds of prefill work before a throughput is taken


@dataclass(frozen=True)
class Limits:
    """How fast and how far a role's desired count may move."""

    min_replicas: int = 1
    max_replicas: int = 16
    up_window_s: float = 15.0
    down_window_s: float = 300.0
    up_period_s: float = 30.0
    up_step: float = 1.0
    down_period_s: float = 60.0


@dataclass(frozen=True)
class Objectives:
    """What a role is sized for."""

    ttft_s: float = 2.0
    tpot_s: float = 0.1
    target: float = 0.8  # share of the measured capacity planned to be used


@dataclass
class Stabiliser:
    """One role's desired count over time: windows, then rate limits, then bounds."""

    limits: Limits
    desired: int
    needs: deque[tuple[float, int]] = field(default_factory=deque)
    counts: deque[tuple[float, int]] = field(default_factory=deque)  # desired over time

    def update(self, now: float, need: int) -> int:
        lim = self.limits
        self.needs.append((now, need))
        self.counts.append((now, self.desired))
        keep = max(lim.up_window_s, lim.down_window_s, lim.up_period_s, lim.down_period_s)
        for series in (self.needs, self.counts):
            while series and series[0][0] < now - keep:
                series.popleft()
        up = min(n for t, n in self.needs if t >= now - lim.up_window_s)
        down = max(n for t, n in self.needs if t >= now - lim.down_window_s)
        target = self.desired
        if up > self.desired:
            base = min(c for t, c in self.counts if t >= now - lim.up_period_s)
            target = min(up, base + max(1, math.ceil(lim.up_step * base)))
        elif down < self.desired:
            base = max(c for t, c in self.counts if t >= now - lim.down_period_s)
            target = max(down, base - 1)
        self.desired = max(lim.min_replicas, min(lim.max_replicas, target))
        return self.desired


@dataclass
class DecodeModel:
    """TPOT against the streams an engine runs, fitted online: what one engine serves."""

    seed: float | None = None  # --decode-capacity, if given
    sw: float = 0.0  # weighted sums of the least-squares fit
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0
    n: int = 0
    lo: float = math.inf  # streams per engine seen, least and most
    hi: float = 0.0
    origin: float | None = None  # streams x slo / tpot: the bound through the origin

    def add(self, streams: float, tpot: float, slo: float) -> None:
        """One finished stream: the streams its engine ran meanwhile, and its TPOT."""
        if streams <= 0 or tpot <= 0 or not math.isfinite(streams + tpot):
            return
        self.sw = self.sw * DECAY + 1
        self.sx = self.sx * DECAY + streams
        self.sy = self.sy * DECAY + tpot
        self.sxx = self.sxx * DECAY + streams * streams
        self.sxy = self.sxy * DECAY + streams * tpot
        self.n += 1
        self.lo, self.hi = min(self.lo, streams), max(self.hi, streams)
        bound = streams * slo / tpot  # capacity if TPOT grew in proportion to the streams
        self.origin = bound if self.origin is None else 0.8 * self.origin + 0.2 * bound

    def line(self) -> tuple[float, float] | None:
        """(a, b) of ``tpot = a + b x streams``, once the samples spread enough."""
        if self.n < MIN_SAMPLES or self.hi - self.lo < MIN_SPREAD:
            return None
        var = self.sxx * self.sw - self.sx * self.sx
        if var <= 1e-12:
            return None
        b = (self.sxy * self.sw - self.sx * self.sy) / var
        a = (self.sy - b * self.sx) / self.sw
        return (a, b) if b > 0 else None

    def capacity(self, slo: float) -> float | None:
        """Streams one engine serves within ``slo``; None: nothing known yet."""
        fit = self.line()
        if fit is not None:
            a, b = fit
            return max(1.0, (slo - a) / b)
        if self.origin is not None:
            return max(1.0, self.origin, self.seed or 0.0)
        return self.seed


@dataclass
class PrefillModel:
    """Prompt tokens one prefill engine gets through per second it is busy."""

    seed: float | None = None  # --prefill-capacity
    rate: float | None = None  # EWMA over windows
    tokens: float = 0.0  # gathered until there is enough busy time to say something
    busy_s: float = 0.0

    def add(self, tokens: float, busy_s: float) -> None:
        self.tokens += max(tokens, 0.0)
        self.busy_s += max(busy_s, 0.0)
        if self.busy_s < MIN_BUSY_S or self.tokens <= 0:
            return
        seen = self.tokens / self.busy_s
        self.rate = seen if self.rate is None else 0.7 * self.rate + 0.3 * seen
        self.tokens = self.busy_s = 0.0

    def capacity(self) -> float | None:
        return self.rate if self.rate is not None else self.seed


@dataclass(frozen=True)
class RoleSignals:
    """What the proxy saw of one role over the last window."""

    engines: int  # taking work now
    in_flight: float = 0.0  # requests (decode, replica: streams) in flight
    arrivals_s: float = 0.0  # prefill: prompt tokens placed per second
    backlog: float = 0.0  # prefill: prompt tokens in flight
    latency_p90: float | None = None  # TPOT (decode), TTFT (prefill, replica); None: no sample
    kv_limit: float | None = None  # streams one engine's KV holds (from vLLM's metrics)


@dataclass(frozen=True)
class Need:
    """One role's need from one proxy's traffic: additive over proxies and workers."""

    engines: float  # the load's need times the latency pressure (0 while nothing is known)
    capacity: float | None  # per engine: streams (decode, replica) or tokens/s (prefill)
    pressure: float  # p90 latency / objective when above 1 with work in flight, else 1
    why: str  # load, slo (the objective is missed), hold (nothing measured yet)


def decode_need(
    sig: RoleSignals, model: DecodeModel, obj: Objectives
) -> tuple[float, float | None]:
    cap = model.capacity(obj.tpot_s)
    if cap is not None and sig.kv_limit is not None:
        cap = min(cap, max(1.0, sig.kv_limit * obj.target))
    if cap is None:
        return 0.0, None
    return sig.in_flight / (cap * obj.target), cap


def prefill_need(
    sig: RoleSignals, model: PrefillModel, obj: Objectives
) -> tuple[float, float | None]:
    cap = model.capacity()
    if cap is None:
        return 0.0, None
    keep_up = sig.arrivals_s / (cap * obj.target)
    clear = sig.backlog / (cap * obj.ttft_s)
    return max(keep_up, clear), cap


class RoleScaler:
    """One role: its capacity model, its objective and its stabiliser."""

    def __init__(
        self, role: str, limits: Limits, obj: Objectives, start: int, *,
        decode_seed: float | None = None, prefill_seed: float | None = None,
    ) -> None:  # fmt: skip
        self.role = role
        self.obj = obj
        self.decode = DecodeModel(decode_seed)
        self.prefill = PrefillModel(prefill_seed)
        self.stable = Stabiliser(limits, max(limits.min_replicas, min(limits.max_replicas, start)))

    @property
    def slo(self) -> float:
        """The objective of this role's latency: TTFT for prefill and replica, TPOT for decode."""
        return self.obj.tpot_s if self.role == "decode" else self.obj.ttft_s

    def need(self, sig: RoleSignals) -> Need:
        """This proxy's share of the role's need (its models fed beforehand)."""
        if self.role == "prefill":
            load, cap = prefill_need(sig, self.prefill, self.obj)
        else:
            load, cap = decode_need(sig, self.decode, self.obj)
        busy = sig.in_flight > 0 or sig.backlog > 0
        late = busy and sig.latency_p90 is not None and sig.latency_p90 > self.slo
        pressure = sig.latency_p90 / self.slo if late and sig.latency_p90 is not None else 1.0
        why = "hold" if cap is None else "slo" if late else "load"
        return Need(load * pressure, cap, pressure, why)

    def decide(self, now: float, need: float, engines: int, *, late: bool, hold: bool) -> int:
        """The desired count from the summed need of every proxy (``hold``: none has
        measured anything yet, so the count stays); a missed objective asks for one
        engine more than there are."""
        wanted = self.stable.desired if hold else math.ceil(round(need, 6))
        if late:
            wanted = max(wanted, engines + 1)
        return self.stable.update(now, wanted)
