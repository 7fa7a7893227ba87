"""Streams through simulated a3/deepseekv4-flash/2p2d surviving the loss of an engine's node.

    .venv/bin/python benchmarks/migration_campaign.py --groups 10 --runs 10

For each scenario of tests/proxy/node_loss.py (every DP rank of decode engine
``decode0`` killed mid-answer; node 2, ``decode0``'s, lost silently mid-answer;
node 1, ``prefill1``'s, lost silently while a prefill runs there or a decoder
pulls its KV), ``--groups`` groups of ``--runs`` runs of 16 greedy streams each
(completions with max_tokens, chat without it, chat that thinks, chat with a
tool or a JSON schema). Per group it prints the runs whose 16 streams all ended
whole and equal to the unfaulted answers (field for field, and byte for byte
events and all), the streams whole / equal / byte-equal out of 16 x runs, and
what the proxy counted: migrations by outcome, failures by the scope its probes
found (node, engine, instance, request), retries by stage, and for the prefill
scenario the runs where the loss met a prefill or pull under way.
``--without-domains`` is the positive control: the same runs through a proxy
not told which backends share an engine and a node. Simulated:
the figures say what the proxy does with these faults, not how fast a cluster is.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.proxy.node_loss import SCENARIOS, STREAMS, Outcome, campaign  # noqa: E402


def _line(scenario: str, group: int, runs: list[Outcome]) -> str:
    streams = STREAMS * len(runs)
    clean = sum(r.whole == r.same == STREAMS for r in runs)
    total: dict[str, Counter[str]] = {"migrations": Counter(), "failures": Counter(),
                                      "retries": Counter()}  # fmt: skip
    for r in runs:
        total["migrations"] += r.migrations
        total["failures"] += r.failures
        total["retries"] += r.retries
    parts = [
        f"{scenario} group {group + 1}: {clean}/{len(runs)} runs all 16 whole and equal",
        f"streams whole {sum(r.whole for r in runs)}/{streams}",
        f"equal {sum(r.same for r in runs)}/{streams}",
        f"byte-equal {sum(r.framed for r in runs)}/{streams}",
    ]
    for name, counts in total.items():
        parts.append(f"{name} " + (" ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "-"))
    if scenario.startswith("prefill"):
        parts.append(f"loss met work {sum(r.met for r in runs)}/{len(runs)}")
    else:
        cut = sum(sum(r.migrations.values()) > 0 for r in runs)
        parts.append(f"runs whose loss cut a stream {cut}/{len(runs)}")
    return "; ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--scenario", choices=SCENARIOS, action="append")
    parser.add_argument("--speed", type=float, default=2.0, help="simulated time per wall second")
    parser.add_argument(
        "--without-domains", action="store_true",
        help="positive control: the proxy without the Plan's --failure-domains",
    )  # fmt: skip
    args = parser.parse_args()
    failed = 0
    for scenario in args.scenario or SCENARIOS:
        started = time.monotonic()
        groups = campaign(
            scenario, args.groups, args.runs, args.speed,
            on_group=lambda g, runs, s=scenario: print(_line(s, g, runs), flush=True),
            domains=not args.without_domains,
        )  # fmt: skip
        failed += sum(not (r.whole == r.same == STREAMS) for runs in groups for r in runs)
        print(
            f"{scenario}: {time.monotonic() - started:.0f} s (wall, busy shared host)", flush=True
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
