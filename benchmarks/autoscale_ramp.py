"""The autoscaler's decisions on a synthetic 4x ramp, against static deployments.

    .venv/bin/python benchmarks/autoscale_ramp.py [--hours 1] [--start-s 60] \\
        [--plot replicas.png] [--json out.json]

No engine runs here: this characterises the controller (servekit.proxy.autoscale),
its lag and its rate limits, on a synthetic deployment that answers it as
tests/proxy/test_autoscale.py's does: decode engines whose time per output token
is ``20 ms + 4 ms x streams`` (20 streams fit the 100 ms objective), prefill
engines that prefill 8,000 prompt tokens per busy second, and new engines that
serve ``--start-s`` after they were asked for (removed ones go at once). The
load (decode streams in flight, prompt tokens a second) is low for the first
sixth of the run, ramps up 4x over the next twelfth, holds, ramps back down and
holds low again. Per role: engine-seconds used against a static deployment
sized for the peak and one sized for the trough, and the share of the run in
which the served latency met its objective (for decode, TPOT at the streams per
ready engine; for prefill, the arrivals within the ready engines' throughput).
"""

from __future__ import annotations

import argparse
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servekit.proxy.autoscale import Limits, Objectives, RoleScaler, RoleSignals

OBJ = Objectives(ttft_s=2.0, tpot_s=0.1, target=0.8)
TICK_S = 5.0
LOW = {"decode": 16.0, "prefill": 6000.0}  # streams; prompt tokens a second
PREFILL_RATE = 8000.0  # tokens per busy second of one prefill engine


def tpot(streams: float) -> float:
    return 0.02 + 0.004 * streams


def load(t: float, span: float, low: float) -> float:
    """Low, a 4x ramp up, high, a ramp down, low (in twelfths of the span)."""
    x = t / span * 12
    if x < 2:
        return low
    if x < 3:
        return low * (1 + 3 * (x - 2))
    if x < 6:
        return 4 * low
    if x < 7:
        return low * (4 - 3 * (x - 6))
    return low


@dataclass
class Fleet:
    start_s: float
    ready: int = 1
    starting: list[float] = field(default_factory=list)

    def follow(self, now: float, desired: int) -> None:
        self.ready += sum(1 for t in self.starting if t <= now)
        self.starting = [t for t in self.starting if t > now]
        total = self.ready + len(self.starting)
        if desired > total:
            self.starting += [now + self.start_s] * (desired - total)
        elif desired < total:
            cancel = min(total - desired, len(self.starting))
            self.starting = self.starting[: len(self.starting) - cancel]
            self.ready -= total - desired - cancel

    @property
    def held(self) -> int:
        """Engines paid for now: ready ones and those starting."""
        return self.ready + len(self.starting)


def simulate(span: float, start_s: float, seed: int = 7) -> dict[str, list[dict[str, float]]]:
    rng = random.Random(seed)
    limits = Limits()
    scalers = {r: RoleScaler(r, limits, OBJ, 1) for r in ("prefill", "decode")}
    fleets = {r: Fleet(start_s) for r in scalers}
    out: dict[str, list[dict[str, float]]] = {r: [] for r in scalers}
    t = 0.0
    while t < span:
        for role, scaler in scalers.items():
            fleet, offered = fleets[role], load(t, span, LOW[role])
            if role == "decode":
                per = offered / fleet.ready
                for _ in range(10):
                    s = per * rng.uniform(0.8, 1.2)
                    scaler.decode.add(s, tpot(s), OBJ.tpot_s)
                sig = RoleSignals(fleet.ready, in_flight=offered, latency_p90=tpot(per) * 1.05)
                met = tpot(per) <= OBJ.tpot_s
            else:
                busy = min(1.0, offered / (PREFILL_RATE * fleet.ready))
                scaler.prefill.add(PREFILL_RATE * busy * fleet.ready * TICK_S,
                                   busy * fleet.ready * TICK_S)  # fmt: skip
                sig = RoleSignals(fleet.ready, in_flight=1, arrivals_s=offered,
                                  backlog=offered * 0.2)  # fmt: skip
                met = offered <= PREFILL_RATE * fleet.ready
            need = scaler.need(sig)
            desired = scaler.decide(t, need.engines, fleet.ready, late=need.pressure > 1,
                                    hold=need.why == "hold")  # fmt: skip
            out[role].append({"t": t, "load": offered, "need": need.engines, "desired": desired,
                              "ready": fleet.ready, "held": fleet.held, "met": float(met)})  # fmt: skip
            fleet.follow(t, desired)
        t += TICK_S
    return out


def summary(rows: list[dict[str, float]], role: str) -> dict[str, Any]:
    used = sum(r["held"] for r in rows) * TICK_S
    # a static deployment planned the same way: 20 streams or 8,000 tokens/s at the target
    per_engine = (20.0 if role == "decode" else PREFILL_RATE) * OBJ.target
    peak = math.ceil(max(r["load"] for r in rows) / per_engine)
    trough = math.ceil(min(r["load"] for r in rows) / per_engine)
    span = len(rows) * TICK_S

    def met_with(engines: int) -> float:  # the share of the run a static deployment meets it
        if role == "decode":
            return sum(tpot(r["load"] / engines) <= OBJ.tpot_s for r in rows) / len(rows)
        return sum(r["load"] <= PREFILL_RATE * engines for r in rows) / len(rows)

    return {
        "engine_seconds": used,
        "static_peak_engines": peak,
        "vs_static_peak": used / (peak * span),
        "static_trough_engines": trough,
        "vs_static_trough": used / (trough * span),
        "objective_met_share": sum(r["met"] for r in rows) / len(rows),
        "static_peak_met_share": met_with(peak),
        "static_trough_met_share": met_with(trough),
        "desired_min_max": (min(r["desired"] for r in rows), max(r["desired"] for r in rows)),
    }


def plot(out: dict[str, list[dict[str, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    for ax, (role, rows) in zip(axes, out.items(), strict=True):
        ts = [r["t"] / 60 for r in rows]
        ax.step(ts, [r["desired"] for r in rows], where="post", label="desired")
        ax.step(ts, [r["ready"] for r in rows], where="post", label="ready")
        ax.plot(ts, [r["need"] for r in rows], linewidth=0.8, label="need (before the windows)")
        ax.set_ylabel(f"{role} engines")
        ax.legend(loc="upper right", fontsize=7)
    axes[-1].set_xlabel("minutes (synthetic 4x ramp; no engine ran)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hours", type=float, default=1.0)
    p.add_argument("--start-s", type=float, default=60.0, help="an engine's start-up time")
    p.add_argument("--plot", type=Path)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    out = simulate(args.hours * 3600, args.start_s)
    for role, rows in out.items():
        print(role, json.dumps(summary(rows, role)))
        marks = rows[:: max(1, len(rows) // 24)]
        print("  t(min)  " + " ".join(f"{r['t'] / 60:5.0f}" for r in marks))
        print("  desired " + " ".join(f"{r['desired']:5.0f}" for r in marks))
        print("  ready   " + " ".join(f"{r['ready']:5.0f}" for r in marks))
    if args.plot:
        plot(out, args.plot)
    if args.json:
        args.json.write_text(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
