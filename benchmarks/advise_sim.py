"""The advisor's error on the simulator, against an engine profile it never reads.

    .venv/bin/python benchmarks/advise_sim.py --out /tmp/advise-sim
        [--layouts 1node,1p1d,1p3d,2p1x2d,2p2d,3p1d,2nodes] [--rates 1,4,12]
        [--seconds 25] [--min-requests 60] [--isl lognormal:2048,0.6] [--osl uniform:128,512]
        [--prefix-share 0.3] [--slo ttft=1500,tpot=40] [--calibration DIR] [--report-only]

The simulated hardware is the simulator with its ``a3-dsv4-flash`` profile, the
one ``servekit up --engine sim`` gives every A3 layout. The advisor never reads
it: as on real hardware, one simulated engine of each role (prefill, decode,
mixed) is started here and calibrated only by ``servekit advise calibrate
--target URL`` (``servekit bench`` workloads and a running-sequences probe),
and the KV hand-off by ``--pair`` through servekit's proxy in front of a
prefill and a decode engine. On the simulator every endpoint is one engine of
its profile whatever its TP or DP ranks (``servekit.local.simrun``), so each
role's engine is declared to stand for every shape of that role the family
uses; on hardware each shape would be measured on its own.

Then, per request rate, one workload is drawn (seeded; ``--seconds`` of
arrivals, at least ``--min-requests``), ``servekit advise`` predicts every
catalog layout of a3/deepseekv4-flash on 4 nodes (``--json``), and each layout
of ``--layouts`` is run (``servekit up --engine sim``, speed 1), measured with
``servekit bench --trace`` and stopped. Results go to ``--out``
(``results.json``, ``results.md``); ``--report-only`` re-reads them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from advise_common import (
    Cell,
    advise_json,
    first_choices,
    load_cells,
    markdown,
    measure,
    measured_of,
    predicted_of,
    save,
    servekit,
    summary,
    workload,
    write_band,
)

from servekit.advise import AdviseOptions, slo_of
from servekit.deployment import Deployment, Endpoint

KIND = "sim"
CAMPAIGN = "the simulator campaign (a3/deepseekv4-flash, engines calibrated by bench only)"
COMMAND = ".venv/bin/python benchmarks/advise_sim.py --out DIR --write-band"
FAMILY = "a3/deepseekv4-flash"
PROFILE = "a3-dsv4-flash"
SHAPES = {
    "prefill": ("prefill:tp4:dp1", "prefill:tp1:dp16"),
    "decode": ("decode:tp1:dp1", "decode:tp1:dp32"),
    "mixed": ("mixed:tp4:dp4", "mixed:tp4:dp8"),
}


def lab_spec() -> dict[str, object]:
    """One engine per role to calibrate, and a PD pair for the hand-off."""
    common = {"port": 0, "profile": PROFILE, "max_model_len": 65536}
    return {
        "endpoints": [
            {"name": "cal-prefill", "role": "prefill", **common},
            {"name": "cal-decode", "role": "decode", **common},
            {"name": "cal-mixed", "role": "mixed", **common},
            {"name": "pair-prefill", "role": "prefill", "engine_id": "p", "kv_port": 36000,
             **common},
            {"name": "pair-decode", "role": "decode", "engine_id": "d", "kv_port": 36100,
             **common},
        ]
    }  # fmt: skip


def _wait(path: Path, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 120
    while not path.is_file():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start")
        time.sleep(0.1)
    time.sleep(0.2)


@contextlib.contextmanager
def lab(work: Path) -> Iterator[tuple[dict[str, str], Path]]:
    """The calibration engines and the pair's proxy; (URL by name, pair deployment file)."""

    spec, ready = work / "lab.json", work / "lab-ready.json"
    spec.write_text(json.dumps(lab_spec()))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "servekit.sim", "--spec", str(spec), "--ready-file", str(ready)],
            stdout=subprocess.DEVNULL, stderr=(work / "lab-sim.log").open("w"),
        )
    ]  # fmt: skip
    try:
        _wait(ready, procs[0], "the simulator")
        urls = {e["name"]: e["url"] for e in json.loads(ready.read_text())["endpoints"]}
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "servekit.proxy", "--port", str(port),
                 "--prefill", urls["pair-prefill"], "--decode", urls["pair-decode"]],
                stdout=subprocess.DEVNULL, stderr=(work / "lab-proxy.log").open("w"),
            )
        )  # fmt: skip
        proxy = f"http://127.0.0.1:{port}"
        _await_http(proxy + "/health")
        dep = Deployment(
            engine="sim",
            sim_speed=1.0,
            entry_url=proxy,
            endpoints=(
                Endpoint(name="prefill", role="prefill", url=urls["pair-prefill"]),
                Endpoint(name="decode", role="decode", url=urls["pair-decode"]),
            ),
        )
        pair = work / "pair-deployment.json"
        pair.write_text(dep.model_dump_json(indent=1))
        yield urls, pair
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(30)


def _await_http(url: str) -> None:
    import urllib.request

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as r:
            if r.status == 200:
                return
        time.sleep(0.2)
    raise SystemExit(f"{url} never answered 200")


def calibrate(work: Path, cal: Path) -> None:
    with lab(work) as (urls, pair):
        for role, shapes in SHAPES.items():
            t0 = time.monotonic()
            args = ["advise", "calibrate", "--target", urls[f"cal-{role}"], "--name", role]
            args += [a for s in shapes for a in ("--shape", s)]
            print(servekit(*args, "--out", str(cal)).strip().splitlines()[-3], flush=True)
            print(f"  ({role}: {time.monotonic() - t0:.0f} s)", flush=True)
        print(servekit("advise", "calibrate", "--pair", str(pair), "--out", str(cal)), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--layouts", default="1node,1p1d,1p3d,2p1x2d,2p2d,3p1d,2nodes")
    ap.add_argument("--rates", default="1,4,12")
    ap.add_argument("--seconds", type=float, default=25.0)
    ap.add_argument("--min-requests", type=int, default=60)
    ap.add_argument("--isl", default="lognormal:2048,0.6")
    ap.add_argument("--osl", default="uniform:128,512")
    ap.add_argument("--prefix-share", type=float, default=0.3)
    ap.add_argument("--slo", default="ttft=1500,tpot=40")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--calibration", type=Path, help="reuse a calibration folder")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument(
        "--write-band", action="store_true", help="publish the error as servekit advise's band"
    )
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.json"
    if args.report_only:
        cells, extra = load_cells(results)
        if args.write_band:
            write_band(KIND, cells, CAMPAIGN, COMMAND)
        print(
            markdown(
                cells, first_choices(cells, {float(k): v for k, v in extra["ranking"].items()})
            )
        )
        return
    cal = args.calibration or out / "calibration"
    if args.calibration is None:
        t0 = time.monotonic()
        calibrate(out, cal)
        print(f"calibration: {time.monotonic() - t0:.0f} s", flush=True)
    layouts = [f"{FAMILY}/{n}" for n in args.layouts.split(",")]
    rates = [float(r) for r in args.rates.split(",")]
    traces, preds, ranking = [], {}, {}
    for rate in rates:
        n = max(args.min_requests, round(rate * args.seconds))
        trace = out / f"workload-{rate:g}.jsonl"
        w = workload(rate, n, isl=args.isl, osl=args.osl, share=args.prefix_share,
                     seed=args.seed, path=trace)  # fmt: skip
        print(w.summary(), flush=True)
        common = ["--family", FAMILY, "--nodes", "4", "--devices-per-node", "16",
                  "--calibration", str(cal), "--trace", str(trace), "--slo", args.slo,
                  "--no-derive"]  # fmt: skip
        doc = advise_json(common, out / f"advise-{rate:g}.json")
        preds[rate] = {r["layout"]: r for r in doc["ranking"] if "prediction" in r}
        ranking[rate] = [r["layout"] for r in doc["ranking"] if "prediction" in r]
        traces.append(trace)
    slo = slo_of(AdviseOptions(family=FAMILY, calibration=cal, trace=traces[0], slo=(args.slo,)))
    cells: list[Cell] = []
    for layout in layouts:
        found, wall = measure(layout, None, traces, slo, engine="sim", speed=1.0,
                              work=out / "work")  # fmt: skip
        for rate, m in zip(rates, found, strict=True):
            cell = Cell(layout, rate, predicted_of(preds[rate][layout]), measured_of(m),
                        m.errors, m.requests, wall / len(rates))  # fmt: skip
            cells.append(cell)
            print(f"  {layout} @ {rate:g}/s: pred {cell.predicted} meas {cell.measured} "
                  f"({m.errors} failed)", flush=True)  # fmt: skip
        print(f"  ({layout}: {wall:.0f} s)", flush=True)
        save(results, cells, {"ranking": ranking, "args": vars(args) | {"out": str(out),
             "calibration": str(cal)}, "summary": summary(cells)})  # fmt: skip
    table = markdown(cells, first_choices(cells, ranking))
    (out / "results.md").write_text(table + "\n")
    if args.write_band:
        write_band(KIND, cells, CAMPAIGN, COMMAND)
    print(table)


if __name__ == "__main__":
    main()
