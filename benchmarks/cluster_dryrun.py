"""The cluster dry run, timed: a layout's ModelArts entry on loopback nodes, then verify.

Renders the layout with ``--target modelarts``, writes a real rank table whose
nodes are 127.0.0.2, 127.0.0.3, ..., runs every node's ``run.sh`` under dash
with the simulated ``vllm`` on PATH (``servekit.platforms.modelarts.fake``), waits until
every engine and the proxy answer, then runs

    servekit verify NAME --target http://127.0.0.2:8080 --nodes 127.0.0.2,... --logs DIR \\
        --reference URL --engine sim

(and, with ``--relay``, the same without ``--nodes``: engines only through the
proxy), and tears everything down. Prints the timings, the processes and
their memory at ready, acceptance N/N and the figures of each verify:

    .venv/bin/python benchmarks/cluster_dryrun.py --layout a3/1p3d --speed 10 --relay
    .venv/bin/python benchmarks/cluster_dryrun.py --layout a3/1p1d
    .venv/bin/python benchmarks/cluster_dryrun.py --layout a3/1p1d --speed 50 --full
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from servekit.platforms import DryCluster, dry_cluster, leftovers


def _processes(cluster: DryCluster) -> tuple[int, float]:
    """(processes, total RSS MiB) in the cluster's process groups, read from /proc."""
    groups = {n.popen.pid for n in [*cluster.nodes, *cluster.reference] if n.popen is not None}
    count, rss_kib = 0, 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            status = (entry / "status").read_text()
        except OSError:
            continue
        pgid = int(stat.rsplit(")", 1)[1].split()[2])
        if pgid in groups:
            count += 1
            rss = [ln for ln in status.splitlines() if ln.startswith("VmRSS:")]
            rss_kib += int(rss[0].split()[1]) if rss else 0
    return count, rss_kib / 1024


def _verify(args: list[str], out: Path, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "servekit", "verify", *args, "--out", str(out), "--no-baseline"]
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    run = json.loads((out / "run.json").read_text()) if (out / "run.json").is_file() else {}
    accept = out / "accept" / "result.json"
    checks = json.loads(accept.read_text())["checks"] if accept.is_file() else []
    bench = out / "bench" / "bench.json"
    points = json.loads(bench.read_text())["points"] if bench.is_file() else []
    passed = sum(c["verdict"] == "pass" for c in checks)
    ran = sum(c["verdict"] != "skip" for c in checks)
    figures = sum(1 for p in points for f in p["figures"].values() if f["median"] is not None)
    return {
        "exit_code": done.returncode,
        "verify_wall_s": round(took, 1),
        "acceptance": f"{passed}/{ran}",
        "skipped": sorted(c["id"] for c in checks if c["verdict"] == "skip"),
        "failed": sorted(c["id"] for c in checks if c["verdict"] == "fail"),
        "bench_points": len(points),
        "figures_with_a_value": figures,
        "steps": {s["name"]: f"{s['status']} {s['duration_s']:.1f}s" for s in run.get("steps", [])},
        "contexts": json.loads(accept.read_text()).get("contexts") if accept.is_file() else None,
        "first_line": done.stdout.splitlines()[1][:160] if done.stdout.count("\n") > 1 else "",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layout", default="a3/1p3d")
    parser.add_argument("--speed", type=float, default=10.0, help="SERVEKIT_SIM_SPEED of the nodes")
    parser.add_argument("--relay", action="store_true", help="also verify without --nodes")
    parser.add_argument(
        "--full", action="store_true", help="verify --full: 144K and 1M needles, 1024/256, 3 runs"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cluster-dryrun-"))
    env = {
        **os.environ,
        "SERVEKIT_RUNS": str(work / "runs"),
        "XDG_DATA_HOME": str(work / "data"),
        "COLUMNS": "200",
    }
    report: dict[str, Any] = {"layout": args.layout, "speed": args.speed, "full": args.full}
    report["out"] = str(work)
    start = time.perf_counter()
    with dry_cluster(args.layout, speed=args.speed) as cluster:
        report["ready_s"] = round(cluster.started_s, 1)
        report["render_to_ready_s"] = round(time.perf_counter() - start, 1)
        report["nodes"] = list(cluster.addresses)
        report["entry"] = cluster.entry_url
        report["processes"], rss = _processes(cluster)
        report["rss_mib"] = round(rss)
        base = [*cluster.verify_args(), "--engine", "sim", *(["--full"] if args.full else [])]
        report["verify_nodes"] = _verify(base, work / "verify-nodes", env)
        if args.relay:
            relay = [a for a in base if a not in ("--nodes", ",".join(cluster.addresses))]
            relay += ["--speed", f"{args.speed:g}"]  # engines out of reach: declare it
            report["verify_relay"] = _verify(relay, work / "verify-relay", env)
        down = time.perf_counter()
    report["teardown_s"] = round(time.perf_counter() - down, 1)
    report["total_s"] = round(time.perf_counter() - start, 1)
    report["leftover_groups"] = leftovers(cluster)
    report["temp_folder_removed"] = not cluster.root.exists()
    print(json.dumps(report, indent=2))
    ok = report["verify_nodes"]["exit_code"] == 0 and not report["leftover_groups"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
