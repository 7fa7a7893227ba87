"""Write a Mooncake-format trace with shared prefixes, generated from a seed.

No data set is downloaded: the trace is drawn by ``servekit.bench.tracegen``
(Poisson arrivals, a few groups of requests sharing their leading 512-token
blocks, then fresh blocks), so docs, tests and users without a production trace
replay the same file:

    .venv/bin/python benchmarks/make_trace.py --out trace.jsonl [--requests 40] [--rate 2]
        [--groups 3] [--shared-blocks 2] [--seed 0]
    .venv/bin/servekit bench --target ... --trace trace.jsonl

Prints the file's request count, span and the prefix-cache hit rate a perfect
cache would get on it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from servekit.bench.trace import read_trace
from servekit.bench.tracegen import TraceShape, write_trace
from servekit.bench.workloads.trace import trace_hit_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--rate", type=float, default=2.0, help="mean requests per trace second")
    parser.add_argument("--groups", type=int, default=3)
    parser.add_argument("--shared-blocks", type=int, default=2)
    parser.add_argument("--max-own-blocks", type=int, default=2)
    parser.add_argument("--max-output", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    shape = TraceShape(
        requests=args.requests,
        rate=args.rate,
        groups=args.groups,
        shared_blocks=args.shared_blocks,
        own_blocks=(0, args.max_own_blocks),
        output_tokens=(min(8, args.max_output), args.max_output),
        seed=args.seed,
    )
    trace = read_trace(write_trace(args.out, shape))
    rate = trace_hit_rate(trace) or 0.0
    print(
        f"{args.out}: {len(trace.requests)} requests over {trace.span_s:.1f} s; "
        f"a perfect prefix cache would hit {rate:.1%} of prompt tokens"
    )


if __name__ == "__main__":
    main()
