"""The workload a layout is chosen for: a trace, or distributions, a rate and prefix sharing.

A trace is read by ``servekit bench``'s own reader (Mooncake JSONL or Azure
CSV, bounded, one line per fault), so the advisor predicts exactly what
``servekit bench --trace`` would replay. Without a trace, requests are drawn
from a seed: Poisson arrivals at ``--rate``, prompt and output lengths from
``--isl`` and ``--osl`` distributions, and ``--prefix-share`` of each prompt's
leading tokens shared with the other members of one of ``--prefix-groups``
groups (a system prompt). Drawn requests are written as a Mooncake trace when
they must be replayed (``--validate``), so the prediction and the measurement
read the same requests.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servekit.bench import MOONCAKE_BLOCK, TraceRequest, read_trace
from servekit.errors import UsageError
from servekit.vocabulary import atomic_write_text

MAX_DRAWN = 100_000
MAX_LENGTH = 1 << 22

_DIST = re.compile(
    r"(?:(?P<fixed>\d+)|uniform:(?P<lo>\d+),(?P<hi>\d+)|normal:(?P<mean>[\d.]+),(?P<sd>[\d.]+)"
    r"|lognormal:(?P<median>[\d.]+),(?P<sigma>[\d.]+))"
)


@dataclass(frozen=True)
class Dist:
    """A token-length distribution: fixed N, uniform:A,B, normal:MEAN,SD, lognormal:MEDIAN,SIGMA."""

    kind: str
    a: float
    b: float = 0.0

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            value = self.a
        elif self.kind == "uniform":
            value = rng.randint(int(self.a), int(self.b))
        elif self.kind == "normal":
            value = rng.gauss(self.a, self.b)
        else:
            value = self.a * math.exp(rng.gauss(0.0, self.b))
        return int(min(MAX_LENGTH, max(1, round(value))))


def parse_dist(text: str, flag: str) -> Dist:
    """One of the grammar's forms; one line naming them otherwise."""
    match = _DIST.fullmatch(text.strip())
    if match is None:
        raise UsageError(
            f"{flag} {text[:40]!r}: expected N, uniform:A,B, normal:MEAN,SD or "
            "lognormal:MEDIAN,SIGMA (tokens), e.g. 2048 or lognormal:2048,0.5"
        )
    g = match.groupdict()
    if g["fixed"] is not None:
        dist = Dist("fixed", float(g["fixed"]))
    elif g["lo"] is not None:
        dist = Dist("uniform", float(g["lo"]), float(g["hi"]))
        if dist.b < dist.a:
            raise UsageError(f"{flag} {text[:40]!r}: uniform:A,B needs A <= B")
    elif g["mean"] is not None:
        dist = Dist("normal", float(g["mean"]), float(g["sd"]))
    else:
        dist = Dist("lognormal", float(g["median"]), float(g["sigma"]))
    if not 1 <= dist.a <= MAX_LENGTH or dist.b > MAX_LENGTH:
        raise UsageError(f"{flag} {text[:40]!r}: lengths are 1..{MAX_LENGTH} tokens")
    return dist


@dataclass(frozen=True)
class Drawn:
    """What to draw: lengths, arrivals and prefix sharing."""

    isl: Dist
    osl: Dist
    rate: float
    requests: int
    prefix_share: float = 0.0
    prefix_groups: int = 4
    seed: int = 0


def draw(spec: Drawn) -> tuple[TraceRequest, ...]:
    """Requests drawn from a seed (equal seeds, equal requests)."""
    rng = random.Random(spec.seed)
    out: list[TraceRequest] = []
    at = 0.0
    fresh = spec.prefix_groups * (MAX_LENGTH // MOONCAKE_BLOCK + 1)
    for i in range(spec.requests):
        if i:
            at += rng.expovariate(spec.rate)
        isl, osl = spec.isl.draw(rng), spec.osl.draw(rng)
        blocks = -(-isl // MOONCAKE_BLOCK)
        shared = min(blocks, int(spec.prefix_share * isl) // MOONCAKE_BLOCK)
        group = rng.randrange(spec.prefix_groups) if spec.prefix_groups else 0
        ids = [group * (MAX_LENGTH // MOONCAKE_BLOCK + 1) + b for b in range(shared)]
        ids += range(fresh, fresh + blocks - shared)
        fresh += blocks - shared
        out.append(TraceRequest(i + 1, at, isl, osl, tuple(ids)))
    return tuple(out)


@dataclass(frozen=True)
class Workload:
    """The requests a prediction replays, and where they came from."""

    source: str
    requests: tuple[TraceRequest, ...]
    block_size: int = MOONCAKE_BLOCK

    @property
    def span_s(self) -> float:
        return self.requests[-1].at_s if self.requests else 0.0

    def summary(self) -> str:
        isl = [r.input_tokens for r in self.requests]
        osl = [r.output_tokens for r in self.requests]
        rate = len(isl) / self.span_s if self.span_s > 0 else float("inf")
        return (
            f"{self.source}: {len(isl)} requests over {self.span_s:.1f} s ({rate:.2f}/s), "
            f"ISL p50 {np.percentile(isl, 50):,.0f} p90 {np.percentile(isl, 90):,.0f}, "
            f"OSL p50 {np.percentile(osl, 50):,.0f}, prefix a perfect cache would hit "
            f"{implied_hit_rate(self.requests, self.block_size):.0%}"
        )

    def write_mooncake(self, path: Path) -> Path:
        """The requests as a Mooncake JSONL trace (what ``servekit bench --trace`` replays)."""
        lines = (
            json.dumps(
                {
                    "timestamp": round(r.at_s * 1000, 3),
                    "input_length": r.input_tokens,
                    "output_length": r.output_tokens,
                    "hash_ids": list(r.hash_ids),
                }
            )
            for r in self.requests
        )
        atomic_write_text(path, "".join(line + "\n" for line in lines))
        return path


def implied_hit_rate(requests: Sequence[TraceRequest], block: int = MOONCAKE_BLOCK) -> float:
    """Share of prompt tokens in blocks whose id and every earlier id were seen before."""
    seen: set[int] = set()
    hit = total = 0
    for r in requests:
        total += r.input_tokens
        prefix = True
        for i, h in enumerate(r.hash_ids):
            prefix = prefix and h in seen
            hit += min(block, r.input_tokens - i * block) if prefix else 0
            seen.add(h)
    return hit / total if total else 0.0


def trace_workload(path: Path, speed: float = 1.0, limit: int | None = None) -> Workload:
    """A trace file read by bench's reader; ``speed`` trace seconds per second."""
    trace = read_trace(path, limit=limit)
    reqs = tuple(
        TraceRequest(r.line, r.at_s / speed, r.input_tokens, r.output_tokens, r.hash_ids)
        for r in trace.requests
    )
    return Workload(f"{path.name} ({trace.format})", reqs, trace.block_size)


def drawn_workload(spec: Drawn) -> Workload:
    if not 1 <= spec.requests <= MAX_DRAWN:
        raise UsageError(f"--requests {spec.requests}: draw 1..{MAX_DRAWN} requests")
    return Workload(
        f"drawn (seed {spec.seed}, {spec.rate:g}/s, prefix share {spec.prefix_share:g})",
        draw(spec),
    )
