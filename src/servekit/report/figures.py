"""The verification table and the headline, computed from the result files.

Nothing here is typed by hand: each row is read from the acceptance result, the
benchmark points or the kit check, and every figure links to the file it came
from. A simulated figure always says so.
"""

from __future__ import annotations

from collections.abc import Mapping

from servekit.accept import AcceptResult, CheckResult
from servekit.bench import BenchResult, Figure, Point
from servekit.numbers import fmt
from servekit.report.models import KitCheck, VerifyRun
from servekit.report.view import Mark, Part, Row

PointFiles = Mapping[tuple[str, str], str]

SINGLE = ("tok_per_s", "ms_per_step", "acceptance_length")
MULTI = ("total_tok_per_s", "per_stream_tok_per_s")
PREFILL = ("prefill_tok_per_s",)
KV = ("kv_cache_tokens",)
TITLES = {
    "tok_per_s": "decode",
    "ms_per_step": "ms/step",
    "acceptance_length": "A",
    "total_tok_per_s": "total",
    "per_stream_tok_per_s": "per stream",
    "prefill_tok_per_s": "prefill",
    "kv_cache_tokens": "KV",
}


def fmt_figure(fig: Figure | None) -> str:
    """A figure as ``113.4 tok/s`` (median over its runs; rules in :mod:`servekit.numbers`)."""
    if fig is None or fig.median is None:
        return "no valid run"
    return f"{fmt(fig.median, fig.unit)} {fig.unit}"


def sim_suffix(run: VerifyRun, speed: float | None = None) -> str:
    """Where a figure came from, beside it: `` (simulated)`` (with the speed when it was not
    real time), `` (real engines)``, or `` (engines unconfirmed)``."""
    if run.engine == "vllm":
        return " (real engines)"
    if not run.simulated:
        return " (engines unconfirmed)"
    return " (simulated)" if speed in (None, 1.0) else f" (simulated at {speed:g}x speed)"


SKIP_WORDS = (
    ("capability", "capability"),
    ("max_model_len", "context"),
    ("reference", "reference"),
    ("direct", "relay"),
    ("--nodes", "relay"),
    ("does not offer", "unsupported"),
    ("log", "logs"),
    ("metric", "metrics"),
    ("proxy", "topology"),
    ("decode", "topology"),
    ("replica", "topology"),
)


def skip_word(reason: str) -> str:
    """A skipped check's reason in one word (capability, context, reference, relay, ...)."""
    low = reason.lower()
    return next((word for key, word in SKIP_WORDS if key in low), "not-applicable")


def skip_summary(accept: AcceptResult) -> str:
    """``15 skipped (capability 12, reference 3)``; empty when nothing was skipped."""
    words: dict[str, int] = {}
    for check in accept.checks:
        if check.verdict == "skip":
            word = skip_word(check.reason)
            words[word] = words.get(word, 0) + 1
    if not words:
        return ""
    why = ", ".join(f"{w} {n}" for w, n in sorted(words.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{sum(words.values())} skipped ({why})"


def judged(verdicts: list[str]) -> Mark:
    """A row's mark from its checks: a failure fails it, all skipped is no verdict (never ✗)."""
    if any(v == "fail" for v in verdicts):
        return "fail"
    return "none" if verdicts and all(v == "skip" for v in verdicts) else "ok"


def _check(accept: AcceptResult | None, check_id: str) -> CheckResult | None:
    if accept is None:
        return None
    return next((c for c in accept.checks if c.id == check_id), None)


def _check_part(check: CheckResult, accept_dir: str) -> Part:
    return Part(f"{check.id} {check.verdict}", check_href(check, accept_dir))


def service_row(run: VerifyRun, accept: AcceptResult | None, accept_dir: str) -> Row:
    """Service up: the up step and the health and models checks."""
    up = run.step("up")
    parts = [Part(f"up: {up.detail}" if up else "up: not run", run.files.deployment)]
    checks = [_check(accept, i) for i in ("service.health", "service.models")]
    parts += [_check_part(c, accept_dir) for c in checks if c is not None]
    ok = up is not None and up.status == "ok" and all(c and c.verdict == "pass" for c in checks)
    return Row("Service up", tuple(parts), "ok" if ok else "fail")


def acceptance_row(run: VerifyRun, accept: AcceptResult | None) -> Row:
    if accept is None:
        step = run.step("accept")
        return Row("Acceptance", (Part(step.detail if step else "not run"),), "fail")
    text = _accept_counts(run, accept)
    return Row("Acceptance", (Part(text, run.files.accept),), "ok" if accept.ok else "fail")


def _accept_counts(run: VerifyRun, accept: AcceptResult) -> str:
    """``12/14 passed, 0 failed, 2 skipped (capability 2)``, and where they ran."""
    c = accept.counts
    skipped = skip_summary(accept) or "0 skipped"
    sim = sim_suffix(run, accept.sim_speed)
    return f"{c.passed}/{c.ran} passed, {c.failed} failed, {skipped}{sim}"


CACHE_HITS = (
    ("prefill_prefix_cache_hits", "prefill hits"),
    ("decode_prefix_cache_hits", "decode hits"),
    ("decode_external_prefix_cache_hits", "decode KV pulled"),
    ("mixed_prefix_cache_hits", "hits"),
)


def cache_row(run: VerifyRun, accept: AcceptResult | None, accept_dir: str) -> Row | None:
    """Prefix caching on one long prompt, cold then hot twice: speed-up and each side's hits."""
    checks = [c for c in (accept.checks if accept else ()) if c.group == "cache"]
    if not checks:
        return None
    parts: list[Part] = []
    for check in checks:
        m = check.measurements
        label = check.id.split(".")[1] if check.id.count(".") >= 2 else check.id
        if check.verdict != "pass" or "speedup" not in m:
            parts.append(
                Part(f"{label}: {check.verdict}: {check.reason}", check_href(check, accept_dir))
            )
            continue
        hits = [f"{name} {float(m[key]):,.0f}" for key, name in CACHE_HITS if key in m]
        if m.get("prefix_caching_off"):
            head = f"{label}: prefix caching off on the engines (no hit expected), cold/hot TTFT {float(m['speedup']):g}; "
        else:
            head = f"{label}: hot TTFT {float(m['speedup']):g}x faster than cold; "
        text = head + ", ".join(hits)
        parts.append(Part(text + " tokens", check_href(check, accept_dir)))
    return Row(
        f"Prefix cache (cold, hot, hot){sim_suffix(run, accept.sim_speed if accept else None)}",
        tuple(parts),
        judged([c.verdict for c in checks]),
    )


def check_href(check: CheckResult, accept_dir: str) -> str:
    """A check's evidence: its first recorded response, else the acceptance result."""
    responses = [e for e in check.evidence if e.kind == "response"]
    return f"{accept_dir}/{responses[0].path}" if responses else f"{accept_dir}/result.json"


def _point_parts(point: Point, names: tuple[str, ...], href: str | None) -> list[Part]:
    figs = [(n, point.figures[n]) for n in names if n in point.figures]
    if not figs:
        figs = list(point.figures.items())[:2]
    texts = [f"{TITLES.get(n, n)} {fmt_figure(f)}" for n, f in figs]
    label = f"{point.label}: " if point.label else ""
    return [Part(label + ", ".join(texts), href)]


def _points_row(
    item: str, workload: str, names: tuple[str, ...], bench: BenchResult, files: PointFiles
) -> Row | None:
    points = [p for p in bench.points if p.workload == workload]
    if not points:
        return None
    parts: list[Part] = []
    mark: Mark = "ok"
    for point in points:
        parts += _point_parts(point, names, files.get(point.key))
        first = point.figures.get(names[0]) if names else None
        if point.errors or first is None or first.median is None:
            mark = "fail"
    return Row(item, tuple(parts), mark)


BENCH_ROWS = (
    ("Single-stream decode", "single_stream", SINGLE),
    ("Multi-stream decode (concurrency)", "multi_stream", MULTI),
    ("Prefill (cold prefix)", "prefill", PREFILL),
    ("Concurrency sweep", "concurrency_sweep", ()),
    ("Rate sweep", "rate_sweep", ()),
    ("KV capacity", "kv_capacity", KV),
)


def kv_row(item: str, bench: BenchResult, files: PointFiles) -> Row | None:
    """KV capacity, one part per (role, value): 16 identical DP ranks read as one line."""
    points = [p for p in bench.points if p.workload == "kv_capacity"]
    if not points:
        return None
    groups: dict[tuple[str, float | None], list[Point]] = {}
    for p in points:
        fig = p.figures.get("kv_cache_tokens")
        groups.setdefault((str(p.params.get("role", "")), fig.median if fig else None), []).append(
            p
        )
    parts: list[Part] = []
    for (role, _), members in groups.items():
        first = members[0]
        value = fmt_figure(first.figures.get("kv_cache_tokens"))
        if len(members) == 1:
            parts.append(Part(f"{first.label}: KV {value}", files.get(first.key)))
        else:
            names = f"{members[0].label} .. {members[-1].label}"
            text = f"{role} x{len(members)} ({names}): KV {value} each"
            parts.append(Part(text, files.get(first.key)))
    known = all(v is not None for _, v in groups)
    return Row(item, tuple(parts), "ok" if known else "fail")


def bench_rows(run: VerifyRun, bench: BenchResult | None, files: PointFiles) -> list[Row]:
    if bench is None:
        step = run.step("bench")
        return [Row("Benchmarks", (Part(step.detail if step else "not run"),), "fail")]
    rows: list[Row] = []
    sim = sim_suffix(run, bench.inputs.sim_speed)
    for item, workload, names in BENCH_ROWS:
        if workload == "kv_capacity":
            row = kv_row(item + sim, bench, files)
        else:
            row = _points_row(item + sim, workload, names, bench, files)
        if row is not None:
            rows.append(row)
    return rows


def kit_row(kit: KitCheck | None) -> Row:
    if kit is None:
        return Row("Image kit self-check", (Part("not run (no --kit given)"),), "none")
    return Row(
        "Image kit self-check", (Part(kit.summary, kit.evidence),), "ok" if kit.ok else "fail"
    )


def verification_table(
    run: VerifyRun,
    *,
    accept: AcceptResult | None,
    bench: BenchResult | None,
    kit: KitCheck | None,
    files: PointFiles,
    accept_dir: str,
) -> tuple[Row, ...]:
    """The seed's verification table, one row per item."""
    rows = [service_row(run, accept, accept_dir), acceptance_row(run, accept)]
    cache = cache_row(run, accept, accept_dir)
    rows += [cache] if cache is not None else []
    rows += bench_rows(run, bench, files)
    rows.append(kit_row(kit))
    return tuple(rows)


def _pick(bench: BenchResult | None, workload: str, last: bool) -> Point | None:
    """The first point of a workload (or the last: the highest concurrency)."""
    if bench is None:
        return None
    points = [p for p in bench.points if p.workload == workload]
    if not points:
        return None
    return points[-1] if last else points[0]


def headline(
    run: VerifyRun, accept: AcceptResult | None, bench: BenchResult | None, files: PointFiles
) -> tuple[Part, ...]:
    """The report's first line: acceptance N/N and the headline benchmark figures."""
    sim = sim_suffix(run, bench.inputs.sim_speed if bench else None)
    parts: list[Part] = []
    if accept is not None:
        parts.append(Part("acceptance " + _accept_counts(run, accept), run.files.accept))
    else:
        parts.append(Part("acceptance not run"))
    for workload, name, what, last in (
        ("single_stream", "tok_per_s", "single-stream decode", False),
        ("multi_stream", "total_tok_per_s", "multi-stream decode", True),
        ("prefill", "prefill_tok_per_s", "prefill", False),
    ):
        point = _pick(bench, workload, last)
        if point is not None and name in point.figures:
            text = f"{what} {fmt_figure(point.figures[name])} ({point.label}){sim}"
            parts.append(Part(text, files.get(point.key)))
    return tuple(parts)
