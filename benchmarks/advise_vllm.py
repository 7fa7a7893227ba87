"""The advisor's error on real vLLM CPU engines: calibrated on local/single, predicting others.

    flock /tmp/servekit-vllm.lock .venv/bin/python benchmarks/advise_vllm.py --out /tmp/advise-vllm
        [--layouts single,dp2,1p1d] [--rates 2,6,12] [--seconds 20] [--min-requests 40]
        [--isl uniform:64,512] [--osl uniform:16,64] [--slo ttft=500,tpot=60]
        [--calibration DIR] [--report-only]

Run it under the machine-wide lock: it starts real vLLM engines (about 2 GB
each). In a scratch project folder (the tiny model built there, runs under
``SERVEKIT_RUNS`` there): ``servekit up local/single --engine vllm`` is
calibrated by ``servekit advise calibrate --target local/single --shape
mixed:tp1:dp1`` and stopped; that one engine stands for every tp1 engine of the
local layouts, whatever their role, and no PD pair is calibrated, so the
prediction of ``local/1p1d`` takes its KV hand-off (NIXL over loopback) as no
time and says so. Then, per request rate, the workload is drawn (seeded),
``servekit advise --family local`` predicts, and each layout is started once
and measured at every rate by ``servekit bench --trace``, after one
discarded replay of the busiest trace (a fresh engine's first requests pay
one-time costs; the calibration measured a warmed engine).

The machine has two cores shared by every process on it: two engines
(``local/dp2``, ``local/1p1d``) share them with each other and with the
proxy and the load generator, which a calibration of one engine alone cannot
see. The tables say what that does to the error.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
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

KIND = "vllm"
CAMPAIGN = "the real-vLLM campaign (CPU engines, calibrated on local/single, two shared cores)"
COMMAND = "flock /tmp/servekit-vllm.lock .venv/bin/python benchmarks/advise_vllm.py --out DIR --write-band"
FAMILY = "local"


def calibrate(work: Path, cal: Path, max_batch: int) -> None:
    """local/single up on vLLM, calibrated as one mixed tp1 engine, then down."""
    os.environ["SERVEKIT_RUNS"] = str(work / "runs")
    servekit("up", "local/single", "--engine", "vllm", "--detach", "--free-ports", cwd=work)
    try:
        t0 = time.monotonic()
        print(
            servekit(
                "advise", "calibrate", "--target", "local/single", "--shape", "mixed:tp1:dp1",
                "--name", "local/single", "--out", str(cal), "--max-batch", str(max_batch),
                "--decode-isl", "64", "--decode-osl", "64", "--runs", "2", cwd=work,
            ),
            flush=True,
        )  # fmt: skip
        print(f"  (calibration: {time.monotonic() - t0:.0f} s)", flush=True)
    finally:
        servekit("down", "local/single", cwd=work)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--layouts", default="single,dp2,1p1d")
    ap.add_argument("--rates", default="2,6,12")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--min-requests", type=int, default=40)
    ap.add_argument("--isl", default="uniform:64,512")
    ap.add_argument("--osl", default="uniform:16,64")
    ap.add_argument("--prefix-share", type=float, default=0.3)
    ap.add_argument("--slo", default="ttft=500,tpot=60")
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--calibration", type=Path)
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument(
        "--repredict",
        action="store_true",
        help="keep the measured cells of --out, predict them again with --calibration",
    )
    ap.add_argument(
        "--write-band", action="store_true", help="publish the error as servekit advise's band"
    )
    args = ap.parse_args()
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.json"
    if args.report_only:
        cells, extra = load_cells(results)
        if args.write_band:
            write_band(KIND, cells, CAMPAIGN, COMMAND)
        ranking = {float(k): v for k, v in extra["ranking"].items()}
        print(markdown(cells, first_choices(cells, ranking)))
        return
    if args.repredict:
        cells, extra = load_cells(results)
        cal = args.calibration or Path(extra["args"]["calibration"])
        ranking = {}
        for rate in sorted({c.rate for c in cells}):
            trace = out / f"workload-{rate:g}.jsonl"
            common = ["--family", FAMILY, "--nodes", "1", "--calibration", str(cal),
                      "--trace", str(trace), "--slo", args.slo]  # fmt: skip
            doc = advise_json(common, out / f"advise-{rate:g}.json")
            preds = {r["layout"]: r for r in doc["ranking"] if "prediction" in r}
            ranking[rate] = [r["layout"] for r in doc["ranking"] if "prediction" in r]
            for c in (c for c in cells if c.rate == rate):
                c.predicted = predicted_of(preds[c.layout])
        extra["args"]["calibration"] = str(cal)
        save(results, cells, {**extra, "ranking": ranking, "summary": summary(cells)})
        table = markdown(cells, first_choices(cells, ranking))
        (out / "results.md").write_text(table + "\n")
        print(table)
        if args.write_band:
            write_band(KIND, cells, CAMPAIGN, COMMAND)
        return
    work = out / "work"
    work.mkdir(exist_ok=True)
    servekit("model", "tiny", "--out", str(work / ".servekit" / "models" / "tiny"))
    cal = args.calibration or out / "calibration"
    if args.calibration is None:
        calibrate(work, cal, args.max_batch)
    layouts = [f"{FAMILY}/{n}" for n in args.layouts.split(",")]
    rates = [float(r) for r in args.rates.split(",")]
    traces, preds, ranking = [], {}, {}
    for rate in rates:
        n = max(args.min_requests, round(rate * args.seconds))
        trace = out / f"workload-{rate:g}.jsonl"
        w = workload(rate, n, isl=args.isl, osl=args.osl, share=args.prefix_share,
                     seed=args.seed, path=trace)  # fmt: skip
        print(w.summary(), flush=True)
        common = ["--family", FAMILY, "--nodes", "1", "--calibration", str(cal),
                  "--trace", str(trace), "--slo", args.slo]  # fmt: skip
        doc = advise_json(common, out / f"advise-{rate:g}.json")
        preds[rate] = {r["layout"]: r for r in doc["ranking"] if "prediction" in r}
        ranking[rate] = [r["layout"] for r in doc["ranking"] if "prediction" in r]
        traces.append(trace)
    slo = slo_of(AdviseOptions(family=FAMILY, calibration=cal, trace=traces[0], slo=(args.slo,)))
    cells: list[Cell] = []
    for layout in layouts:
        # a fresh engine is warmed by the busiest trace first, as the calibration's was
        found, wall = measure(
            layout, None, traces, slo, engine="vllm", speed=1.0, work=work, warmup=traces[-1]
        )
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
