"""The advisor's fits against a published release table: fitted on part, predicting the rest.

    .venv/bin/python benchmarks/advise_release.py

The first seed's release "A3 TP8 v1" (DeepSeek-V4.1-Flash W4A8, one A3, TP8,
measured on the hardware by its authors) publishes: single-stream decode
116.4 tok/s at 24.84 ms/step; multi-stream decode N=4/8/16 249.5/362.7/536.9
tok/s; cold-prefix prefill 7,135/7,389/7,498 tok/s at N=1/2/4; the 1024/256
comparison workload single-stream 117.1 tok/s; KV capacity 2,987,727 tokens.
These are the measurements; this script feeds some of them to the advisor's
own fits (:func:`servekit.advise.fit_decode`, :func:`servekit.advise.fit_prefill`)
exactly as a calibration would read them from ``servekit bench`` figures, and
predicts the others.

What the table does not say, and how it is taken: the prompt length of the
decode and prefill rows (the decode fit is taken at one context for every N,
so the context slope is not fitted; the prefill prediction does not depend on
the prompt length as long as N prompts fit one engine step, which holds for
any length up to a quarter of the 8,192-token budget); the acceptance length at
N > 1 (taken as the single-stream one: A = 116.4 x 24.84 / 1000 = 2.89, since
the table gives ms/step only for N = 1).
"""

from __future__ import annotations

from servekit.advise import fit_decode, fit_prefill
from servekit.advise.fit import prefill_seconds
from servekit.advise.observe import DecodeObs, PrefillObs

SINGLE_TOK_S, SINGLE_MS = 116.4, 24.84
DECODE = {1: 116.4, 4: 249.5, 8: 362.7, 16: 536.9}  # tok/s, multi-stream N
PREFILL = {1: 7135.0, 2: 7389.0, 4: 7498.0}  # tok/s, cold prefix, N concurrent
COMPARISON_1024_256 = 117.1  # tok/s single stream
ACCEPT = SINGLE_TOK_S * SINGLE_MS / 1000
PROMPT = 1024  # any length with 4 x PROMPT <= the step budget gives the same prediction
BUDGET = 8192


def decode_obs(ns: list[int]) -> list[DecodeObs]:
    """What a calibration reads from multi-stream points: ms/step = A x 1000 x N / tok/s."""
    return [
        DecodeObs(n, 0.0, ACCEPT * n / DECODE[n], ACCEPT, None, 256, f"release N={n}") for n in ns
    ]


def prefill_obs(ns: list[int]) -> list[PrefillObs]:
    """What a calibration reads from prefill points: N prompts at once, the batch's time."""
    return [
        PrefillObs((PROMPT,) * n, (0,) * n, n * PROMPT / PREFILL[n], f"release N={n}") for n in ns
    ]


def row(what: str, fitted: str, pred: float, meas: float) -> str:
    return f"| {what} | {fitted} | {pred:,.1f} | {meas:,.1f} | {100 * (pred - meas) / meas:+.1f}% |"


def main() -> None:
    lines = [
        "| predicted | fitted on | predicted tok/s | published tok/s | error |",
        "|---|---|---|---|---|",
    ]
    for fitted in ([1, 4], [1, 4, 8]):
        fit = fit_decode(decode_obs(fitted), max_running=32)
        label = "decode N=" + ",".join(map(str, fitted))
        for n in (m for m in DECODE if m not in fitted):
            lines.append(row(f"decode N={n}", label, n * ACCEPT / fit.step_s(n), DECODE[n]))
    line = fit_decode(decode_obs([1, 4]), max_running=32)
    (b0, s0), (b1, s1) = line.points
    for n in (8, 16):  # what a straight line through N=1 and 4 would say, for comparison
        step = s0 + (s1 - s0) * (n - b0) / (b1 - b0)
        lines.append(row(f"decode N={n}", "N=1,4, a straight line", n * ACCEPT / step, DECODE[n]))
    fit = fit_decode(decode_obs([1]), max_running=32)
    lines.append(
        row("1024/256 single stream", "decode N=1", ACCEPT / fit.step_s(1), COMPARISON_1024_256)
    )
    pre = fit_prefill(prefill_obs([1, 2]), chunk=BUDGET)
    n = 4
    batch = PrefillObs((PROMPT,) * n, (0,) * n, 0.0, "")
    lines.append(
        row("prefill N=4", "prefill N=1,2", n * PROMPT / prefill_seconds(pre, batch), PREFILL[n])
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
