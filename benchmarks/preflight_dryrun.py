"""The preflight's cost and reach on the dry-run clusters, side by side in one run.

For each layout: the ModelArts dry run (every node's rendered ``run.sh`` under dash,
the stand-in ``hccn_tool`` / ``npu-smi`` of ``servekit.platforms.fakenpu``) started
to ready with the preflight and with ``PREFLIGHT=0``, alternately, ``--rounds``
times each; and the time until every node has refused a launch with one fault
injected per node (the preflight's whole run: checks, exchange, pings, report).
Prints one JSON object: the start times, their ratio, the refusal time and what
the report named on each node. Timings on a shared 2-core machine are noisy:
compare the ratio, taken in one run.

    .venv/bin/python benchmarks/preflight_dryrun.py --layout a3/deepseekv4-flash/2p2d
    .venv/bin/python benchmarks/preflight_dryrun.py --layout a2/glm5.2/1x4p1x4d --rounds 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from servekit.platforms import Faults, dry_cluster, refused_cluster


def _ready_s(layout: str, preflight: bool, failures: list[str]) -> float | None:
    """Seconds from starting the nodes to every API ready; None (the reason kept) when a
    node failed: on a machine other people share, a port can be taken under the run."""
    try:
        with dry_cluster(layout, speed=10.0, reference=False, preflight=preflight) as cluster:
            return cluster.started_s
    except RuntimeError as exc:
        failures.append(f"preflight={preflight}: {str(exc).splitlines()[0][:200]}")
        return None


def _faults(nodes: int) -> Faults:
    """One fault per node, cycling through the six the issue names."""
    kinds: dict[str, Any] = {"link_down": {}, "tls": {}, "unreachable": {}, "busy": {}}
    ports, models = {}, []
    for node in range(nodes):
        kind = node % 6
        if kind == 0:
            models.append(node)
        elif kind == 1:
            kinds["link_down"][node] = (1,)
        elif kind == 2:
            kinds["tls"][node] = 1
        elif kind == 3:
            kinds["unreachable"][node] = ((node + 1) % nodes,)
        elif kind == 4:
            kinds["busy"][node] = (2,)
        else:
            ports[node] = 1  # replaced below by a port of the layout on that node
    return Faults(model_missing=tuple(models), port_taken=ports, **kinds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layout", default="a3/deepseekv4-flash/2p2d")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    from servekit.catalog import load
    from servekit.render import build_plan, port_bindings

    layout = load(args.layout).layout
    plan = build_plan(layout)
    faults = _faults(layout.nodes)
    bindings = port_bindings(plan)
    taken = {n: bindings[n][0][0] for n in faults.port_taken if bindings.get(n)}
    faults = Faults(**{**faults.__dict__, "port_taken": taken})
    with_s: list[float] = []
    without_s: list[float] = []
    failures: list[str] = []
    for _ in range(args.rounds):
        for preflight, into in ((True, with_s), (False, without_s)):
            took = _ready_s(args.layout, preflight, failures)
            if took is not None:
                into.append(took)
    start = time.perf_counter()
    outcomes = refused_cluster(args.layout, faults)
    refused_s = time.perf_counter() - start
    named = {
        o.pod: [ln.strip()[:120] for ln in o.output.split("failures:\n", 1)[-1].splitlines()[:8]]
        for o in outcomes[:1]
    }
    report = {
        "layout": args.layout,
        "nodes": layout.nodes,
        "rounds": args.rounds,
        "ready_with_preflight_s": [round(x, 1) for x in with_s],
        "ready_without_preflight_s": [round(x, 1) for x in without_s],
        "ratio_median": round(statistics.median(with_s) / statistics.median(without_s), 2)
        if with_s and without_s
        else None,
        "start_failures": failures,
        "refused_all_nodes_s": round(refused_s, 1),
        "refused": [o.returncode == 1 and not o.started for o in outcomes],
        "faults": {k: v for k, v in faults.__dict__.items() if v},
        "report_of_node0": named,
    }
    print(json.dumps(report, indent=2))
    return 0 if all(report["refused"]) else 1


if __name__ == "__main__":
    sys.exit(main())
