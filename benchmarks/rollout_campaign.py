"""Rollouts of an elastic rendering under load, repeated, on the fake cluster (issue 41).

    .venv/bin/python benchmarks/rollout_campaign.py [--runs 5] [--replicas 1,2] \\
        [--interval 0.1] [--lws-defaults] [--layout a3/dsv41-ced-pd --engine decode] \\
        [--json out.json]

``--layout`` (``a3/dsv41-ced-pd`` by default) rendered with ``k8s.elastic=on`` runs on
the fake cluster from its manifests (simulated engines, the proxy discovering the pods
through the emulated API server); for each ``--replicas`` count the decode
LeaderWorkerSet ``sk-decode`` is scaled to it and then rolled ``--runs`` times, each
time with another ``--set engines.ENGINE.env.ROLLOUT_MARK=vN`` (``--engine``: the
layout's decode engine) applied while greedy streamed completions go through the proxy
every ``--interval`` seconds (tests/platforms/rollout.py, the same run
``tests/platforms/test_k8s_rollout.py`` makes once). ``--lws-defaults`` removes the
rendered ``rolloutStrategy`` (LWS's defaults: ``maxUnavailable: 1, maxSurge: 0``).

Per rollout: requests sent, failed, cut, answers that differ from the deployment's at
rest, the fewest groups that could serve, the requests that found the proxy without
an engine of the role (they wait, ``k8s.pool_wait``), the proxy's drains (and those
with streams in flight), whether the surge group served, the rollout's seconds, and every finding of
``problems``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.platforms.elastic_ramp import _wait_ready  # noqa: E402
from tests.platforms.rollout import LAYOUT, SETS, Rollout, problems, roll  # noqa: E402

from servekit.platforms.k8s.fake import k8s_dry_cluster  # noqa: E402

DECODE = "sk-decode"


def _lws_defaults(obj: dict[str, Any]) -> None:
    if obj["kind"] == "LeaderWorkerSet":
        obj["spec"].pop("rolloutStrategy", None)


def summary(r: Rollout) -> dict[str, Any]:
    return {
        "replicas": r.replicas,
        "max_surge": r.max_surge,
        "requests": len(r.results),
        "failed": len(r.failed()),
        "cut": len(r.cut()),
        "changed": len(r.changed()),
        "fewest_serving": r.fewest_serving(),
        "drains": r.counted.drains,
        "drains_with_streams": r.counted.waited_drains,
        "pool_waits": r.counted.pool_waits,
        "surge_served": r.surge_pod in r.served if r.max_surge else None,
        "rollout_s": round(r.span[1] - r.span[0], 1),
        "problems": problems(r),
    }


def campaign(args: argparse.Namespace, replicas: int) -> list[dict[str, Any]]:
    out = []
    with k8s_dry_cluster(args.layout, reference=False, sets=SETS, ready_timeout_s=300) as cluster:
        assert cluster.elastic is not None
        if replicas != 1:
            cluster.elastic.scale(DECODE, replicas)
            _wait_ready(cluster, {"decode": replicas})
        for n in range(args.runs):
            sets = [*SETS, f"engines.{args.engine}.env.ROLLOUT_MARK=v{n + 1}"]
            r = roll(cluster, DECODE, sets, edit=_lws_defaults if args.lws_defaults else None,
                     interval=args.interval)  # fmt: skip
            row = summary(r)
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--replicas", default="1,2", help="decode groups, comma-separated")
    ap.add_argument("--interval", type=float, default=0.1, help="seconds between requests")
    ap.add_argument("--lws-defaults", action="store_true", help="remove the rolloutStrategy")
    ap.add_argument("--layout", default=LAYOUT)
    ap.add_argument("--engine", default="decode", help="the decode engine's name in the layout")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    for replicas in (int(x) for x in args.replicas.split(",")):
        rows += campaign(args, replicas)
    print("\n| decode groups | maxSurge | rollouts | requests | failed | cut | changed "
          "| fewest serving | waited for an engine | drains (with streams) | surge served "
          "| seconds |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for replicas in sorted({r["replicas"] for r in rows}):
        mine = [r for r in rows if r["replicas"] == replicas]
        served = [r["surge_served"] for r in mine if r["surge_served"] is not None]
        secs = [r["rollout_s"] for r in mine]
        print(
            f"| {replicas} | {mine[0]['max_surge']} | {len(mine)} "
            f"| {sum(r['requests'] for r in mine)} | {sum(r['failed'] for r in mine)} "
            f"| {sum(r['cut'] for r in mine)} | {sum(r['changed'] for r in mine)} "
            f"| {min(r['fewest_serving'] for r in mine)} "
            f"| {sum(r['pool_waits'] for r in mine)} "
            f"| {sum(r['drains'] for r in mine)} ({sum(r['drains_with_streams'] for r in mine)}) "
            f"| {f'{sum(served)}/{len(served)}' if served else '-'} "
            f"| {min(secs)}-{max(secs)} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
