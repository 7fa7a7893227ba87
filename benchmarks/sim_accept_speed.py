"""How long ``servekit accept`` takes against a simulated layout, at a given speed.

Serves every engine of a catalog layout with ``servekit sim --layout NAME
--speed X`` (one simulator process), puts servekit's proxy in front, writes the
``deployment.json`` that ``servekit up`` would (with ``sim_speed``), then times
``servekit accept --target NAME`` at the seed's contexts and prints the counts:

    .venv/bin/python benchmarks/sim_accept_speed.py --layout a3/1p1d --speed 50
    .venv/bin/python benchmarks/sim_accept_speed.py --layout a3/1p1d --speed 1

Goal (issue 17 item 4): the seed's 144K + 1M matrix on simulated a3/1p1d in
under 60 s on the shared development machine, with the same checks passing as
at speed 1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from servekit.accept.simstack import running_proxy
from servekit.catalog.loader import load
from servekit.deployment import Deployment, Endpoint, run_dir_for
from servekit.proxy import ProxyConfig

READY_TIMEOUT_S = 60.0


def _wait_ready(path: Path, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"simulator did not start (exit {proc.poll()})")
        time.sleep(0.05)
    info: dict[str, Any] = json.loads(path.read_text())
    return info


def _proxy_config(endpoints: list[dict[str, Any]]) -> ProxyConfig:
    by_role: dict[str, list[str]] = {"prefill": [], "decode": [], "mixed": []}
    for ep in endpoints:
        by_role[ep["role"]].append(ep["url"])
    if by_role["prefill"]:
        return ProxyConfig(prefill=tuple(by_role["prefill"]), decode=tuple(by_role["decode"]))
    return ProxyConfig(replica=tuple(by_role["mixed"]), mode="replica")


def _deployment(
    name: str, endpoints: list[dict[str, Any]], proxy: str, log: Path, speed: float
) -> Deployment:
    layout = load(name).layout
    engines = tuple(
        Endpoint(name=e["name"], role=e["role"], url=e["url"], engine_id=e["engine_id"], log=log)
        for e in endpoints
    )
    return Deployment(
        layout=name,
        engine="sim",
        model=layout.model.served_name,
        entry_url=proxy,
        endpoints=(Endpoint(name="proxy", role="proxy", url=proxy), *engines),
        capabilities=tuple(layout.model.capabilities),
        sim_speed=speed,
    )


def _accept(name: str, contexts: str, out: Path, env: dict[str, str]) -> tuple[float, int]:
    cmd = [sys.executable, "-m", "servekit", "accept", "--target", name, "--context", contexts]
    start = time.perf_counter()
    proc = subprocess.run(
        [*cmd, "--out", str(out)], env=env, capture_output=True, text=True, check=False
    )
    return time.perf_counter() - start, proc.returncode


def _summary(out: Path) -> dict[str, Any]:
    doc = json.loads((out / "result.json").read_text())
    verdicts: dict[str, list[str]] = {"pass": [], "fail": [], "skip": []}
    for check in doc["checks"]:
        verdicts[check["verdict"]].append(check["id"])
    return {"sim_speed": doc.get("sim_speed"), **{k: sorted(v) for k, v in verdicts.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layout", default="a3/1p1d")
    parser.add_argument("--speed", type=float, default=50.0)
    parser.add_argument("--context", default="144k,1m")
    parser.add_argument("--out", type=Path, help="keep the accept output here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sim-accept-"))
    out = args.out or work / "accept"
    ready, log = work / "ready.json", work / "sim.log"
    sim_cmd = [sys.executable, "-m", "servekit", "sim", "--layout", args.layout]
    sim_cmd += ["--speed", str(args.speed), "--ready-file", str(ready)]
    with log.open("wb") as sink:
        sim = subprocess.Popen(sim_cmd, stdout=sink, stderr=subprocess.STDOUT)
    try:
        endpoints = _wait_ready(ready, sim)["endpoints"]
        with running_proxy(_proxy_config(endpoints), work / "proxy.log") as proxy:
            dep = _deployment(args.layout, endpoints, proxy, log, args.speed)
            os.environ["SERVEKIT_RUNS"] = str(work / "runs")  # where --target NAME looks
            env = {**os.environ, "COLUMNS": "200"}
            target = run_dir_for(args.layout) / "deployment.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(dep.model_dump_json(indent=2))
            took, code = _accept(args.layout, args.context, out, env)
    finally:
        sim.send_signal(signal.SIGTERM)
        sim.wait(30)
    summary = _summary(out)
    print(json.dumps({"layout": args.layout, "speed": args.speed, "contexts": args.context,
                      "accept_wall_s": round(took, 1), "exit_code": code,
                      "endpoints": len(endpoints), "out": str(out),
                      "counts": {k: len(v) for k, v in summary.items() if k != "sim_speed"},
                      "failed": summary["fail"], "skipped": summary["skip"]}, indent=2))  # fmt: skip
    return code


if __name__ == "__main__":
    sys.exit(main())
