"""A 4x ramp through an elastic PD rendering on the fake cluster, against static ones.

    .venv/bin/python benchmarks/elastic_ramp.py [--span 120] [--low 1.0] \\
        [--plot docs/elastic-k8s-ramp.png] [--json out.json]

``a3/dsv41-ced-pd`` (1 prefill + 1 decode instance) rendered with ``k8s.elastic=on``
and ``k8s.autoscale=keda`` runs on the fake cluster from its manifests, simulated
engines (``a3-dsv4-flash`` profile, real time) behind the rendered proxy, which
discovers the pods through the emulated API server; the HPA that the rendered
ScaledObjects make is emulated over the proxy's ``servekit_desired_replicas``
(tests/platforms/elastic_ramp.py, src/servekit/platforms/k8s/fakelws.py). The
trace (Poisson arrivals, greedy streamed completions of ``--max-tokens`` with
``ignore_eos``, prompts of ``--prompt-words`` words) is low for a fifth of
``--span``, ramps 4x, holds, ramps down and holds low. Four deployments replay it,
one after the other, in one run:

1. elastic, autoscaled;
2. elastic, autoscaled, with the decode pod ``sk-decode-0`` deleted (gracefully, as
   ``kubectl delete pod``: its preStop hook drains it, LWS makes it again) at 45%
   of the span, mid-answer;
3. static at the peak: the most instances of each role run 1 reached, from the start;
4. static at the trough: 1 prefill + 1 decode.

Per run: failed requests, answers that differ byte for byte from run 3's (a static
deployment), goodput (requests a second within both objectives), engine-seconds per
role, and the instances over time (``--plot``: a PNG of runs 1 and 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.platforms.elastic_ramp import (  # noqa: E402
    Run,
    changed,
    elastic_sets,
    ramp_trace,
    rate_at,
    run,
    summary,
)


def _plot(runs: list[Run], span: float, low: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 3.2 * len(runs)), sharex=True)
    for ax, r in zip(axes if len(runs) > 1 else [axes], runs, strict=True):
        t0 = r.span[0]
        xs = [t - t0 for t, _ in r.timeline]
        for role, style in (("prefill", "-"), ("decode", "--")):
            ax.step(xs, [c[role] for _, c in r.timeline], style, where="post", label=role)
        twin = ax.twinx()
        grid = [i * span / 200 for i in range(201)]
        twin.plot(grid, [rate_at(t, span, low) for t in grid], ":", color="grey",
                  label="request rate")  # fmt: skip
        twin.set_ylabel("requests / s")
        if r.deleted:
            at = next((a for a, p, w in r.events if p == r.deleted and w == "terminating"), None)
            if at is not None:
                ax.axvline(at - t0, color="red", linewidth=0.8, label=f"{r.deleted} deleted")
        ax.set_ylabel("instances")
        ax.set_title(r.label)
        ax.legend(loc="upper left")
    axes_list = axes if len(runs) > 1 else [axes]
    axes_list[-1].set_xlabel("seconds into the trace")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--span", type=float, default=120.0, help="seconds of the trace")
    ap.add_argument("--low", type=float, default=1.0, help="requests a second at the trough")
    ap.add_argument("--prompt-words", type=int, default=1500)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--timing", default="1,2,3,8,3",
                    help="k8s.scale_timing: interval, up window, up period, down window, "
                         "down period (s)")  # fmt: skip
    ap.add_argument("--slo-ttft", type=float, default=1.0)
    ap.add_argument("--slo-tpot", type=float, default=0.05,
                    help="per streamed event, as the proxy measures it")  # fmt: skip
    ap.add_argument("--grace", type=int, default=2, help="k8s.drain_grace")
    ap.add_argument("--max-replicas", type=int, default=4)
    ap.add_argument("--plot", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    slo = (a.slo_ttft, a.slo_tpot)
    trace = ramp_trace(a.span, a.low, a.prompt_words, a.max_tokens)
    sets = elastic_sets(a.timing, slo, a.grace, a.max_replicas)
    print(f"{len(trace)} requests over {a.span:g} s", flush=True)
    runs = [run("elastic, autoscaled", trace, sets, autoscale=True)]
    runs.append(run("elastic, autoscaled, sk-decode-0 deleted mid-answer", trace, sets,
                    autoscale=True, delete_at=a.span * 0.45))  # fmt: skip
    peak = {role: max(max(c[role] for _, c in r.timeline) for r in runs[:2])
            for role in ("prefill", "decode")}  # fmt: skip
    runs.append(run(f"static at the peak ({peak['prefill']}P{peak['decode']}D)", trace, sets,
                    autoscale=False, fixed=peak))  # fmt: skip
    runs.append(run("static at the trough (1P1D)", trace, sets, autoscale=False))
    reference = runs[2]
    rows = []
    for r in runs:
        row = summary(r, slo)
        row["changed_vs_static_peak"] = len(changed(r, reference))
        row["answered_by_both"] = sum(1 for x, y in zip(r.results, reference.results, strict=True)
                                      if x.ok and y.ok)  # fmt: skip
        row["leaving_under_load"] = r.leaving_under_load()
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print(
        "| run | requests | failed | changed vs static peak | goodput req/s | "
        "engine-s prefill | engine-s decode | instances prefill | instances decode |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        lo, hi = row["replicas_min"], row["replicas_max"]
        es = row["engine_seconds"]
        print(
            f"| {row['label']} | {row['requests']} | {row['failed']} | "
            f"{row['changed_vs_static_peak']} | {row['goodput_rps']} | {es['prefill']} | "
            f"{es['decode']} | {lo['prefill']}-{hi['prefill']} | {lo['decode']}-{hi['decode']} |"
        )
    if a.plot:
        _plot(runs[:2], a.span, a.low, a.plot)
        print(f"plot: {a.plot}")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
