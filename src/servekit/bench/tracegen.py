"""Generate a Mooncake-format trace with shared prefixes (no data set is downloaded).

The docs, the tests and anyone without a production trace need one that has
what makes replay worth doing: bursty arrivals and prompts that share leading
blocks. :func:`make_trace` draws, from a seed, Poisson arrivals at ``rate``
requests per second; each request belongs to one of ``groups`` "system
prompts" whose first ``shared_blocks`` hash ids every member repeats, then
fresh blocks of its own, the last one partial. Equal seeds give equal files.
``benchmarks/make_trace.py`` writes one from the command line.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from servekit.bench.trace import MOONCAKE_BLOCK
from servekit.vocabulary import atomic_write_text


@dataclass(frozen=True, slots=True)
class TraceShape:
    """What a generated trace looks like."""

    requests: int = 40
    rate: float = 2.0
    """Mean arrivals per second of trace time (Poisson)."""
    groups: int = 3
    shared_blocks: int = 2
    """Leading blocks every request of a group shares."""
    own_blocks: tuple[int, int] = (0, 2)
    """Fresh whole blocks per request after the shared ones (inclusive range)."""
    tail_tokens: tuple[int, int] = (1, 511)
    """Tokens of the partial last block (inclusive range)."""
    output_tokens: tuple[int, int] = (8, 64)
    block_size: int = MOONCAKE_BLOCK
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.tail_tokens[0] <= self.tail_tokens[1] < self.block_size:
            raise ValueError("tail_tokens: a partial block is 0..block_size - 1 tokens")


def make_trace(shape: TraceShape) -> list[dict[str, object]]:
    """The trace's rows, in time order (``timestamp`` in integer ms from 0)."""
    rng = random.Random(shape.seed)
    next_id = shape.groups * shape.shared_blocks
    rows: list[dict[str, object]] = []
    at_s = 0.0
    for i in range(shape.requests):
        if i:
            at_s += rng.expovariate(shape.rate)
        group = rng.randrange(shape.groups)
        ids = [group * shape.shared_blocks + b for b in range(shape.shared_blocks)]
        own = rng.randint(*shape.own_blocks)
        tail = rng.randint(*shape.tail_tokens)
        ids += range(next_id, next_id + own + (1 if tail else 0))
        next_id += own + (1 if tail else 0)
        rows.append(
            {
                "timestamp": round(at_s * 1000),
                "input_length": (shape.shared_blocks + own) * shape.block_size + tail,
                "output_length": rng.randint(*shape.output_tokens),
                "hash_ids": ids,
            }
        )
    return rows


def write_trace(path: Path, shape: TraceShape) -> Path:
    """Write a generated trace as Mooncake JSONL, atomically."""
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in make_trace(shape)))
    return path
