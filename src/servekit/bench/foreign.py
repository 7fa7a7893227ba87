"""Baselines other tools wrote: AIPerf's ``profile_export_aiperf.json``, ``vllm bench serve`` JSON.

A team's history lives in those files, so ``--baseline`` reads them, mapping
each figure to servekit's by its definition, not its name (docs/bench.md):

=====================================  ===============================================
servekit (stats.serving_metrics)        vllm bench serve / AIPerf
=====================================  ===============================================
ttft: send to first token frame         ``*_ttft_ms`` / ``time_to_first_token``
tpot: (E2EL - TTFT) / (tokens - 1)      ``*_tpot_ms`` / ``inter_token_latency``
itl: gaps between token frames, pooled  ``*_itl_ms`` / ``inter_chunk_latency``
e2el: send to the last token frame      ``*_e2el_ms`` / ``request_latency``
request_throughput, output_throughput,  same names / ``request_throughput``,
total_token_throughput (per second)     ``output_token_throughput``, ``total_token_throughput``
=====================================  ===============================================

A figure whose definition differs is refused, with the reason, never compared:
AIPerf counts output tokens with its own tokenizer unless it ran with
``--use-server-token-count`` (servekit counts the server's ``usage``), which
changes TPOT and the token throughputs; neither tool's file records the SLOs
its goodput used, so goodput is never compared. The file becomes a
:class:`BenchResult` with one point (workload ``foreign``) that
:func:`servekit.bench.baseline.compare` matches against every serving-metrics
point.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from servekit.bench.baseline import FOREIGN
from servekit.bench.schema import SCHEMA_VERSION, BenchInputs, BenchResult, Figure, Point
from servekit.bench.stats import figure
from servekit.errors import UsageError
from servekit.vocabulary import read_at_most

MAX_BYTES = 4 << 20
"""The bound is on what parsing costs, not on the bytes: ``json.loads`` of many small
objects holds about 28 times the file (a 63 MiB file peaked at 1.75 GB), so 4 MiB
keeps a hostile file near 110 MB. The files themselves are a few KiB (summary figures;
a ``vllm bench serve --save-detailed`` file adds per-request lists)."""
STATS = (("mean", "avg"), ("p50", "p50"), ("p90", "p90"), ("p99", "p99"))

AIPERF_LATENCY = {
    "ttft": "time_to_first_token",
    "tpot": "inter_token_latency",
    "itl": "inter_chunk_latency",
    "e2el": "request_latency",
}
AIPERF_RATES = {
    "request_throughput": "request_throughput",
    "output_throughput": "output_token_throughput",
    "total_token_throughput": "total_token_throughput",
}
TOKENIZER_COUNTED = ("tpot", "output_throughput", "total_token_throughput")
GOODPUT_WHY = "goodput: the file does not record the SLOs it used"
TOKENS_WHY = (
    "{name}: AIPerf counted output tokens with its own tokenizer (servekit counts the "
    "server's usage); rerun AIPerf with --use-server-token-count"
)


def read_baseline(path: Path) -> BenchResult:
    """A servekit result, an AIPerf export or a vllm bench serve result; else one line, exit 2."""
    where = f"--baseline {path}"
    if not path.is_file():  # a FIFO or a device would block the read
        raise UsageError(f"{where}: no such file; pass a saved bench.json")
    too_large = (
        f"larger than {MAX_BYTES >> 20} MiB; pass a bench.json or a summary"
        " (vllm bench serve without --save-detailed)"
    )
    if path.stat().st_size > MAX_BYTES:  # refused unread; the bounded read covers growth
        raise UsageError(f"{where}: {too_large}")
    data = read_at_most(path, MAX_BYTES, where, too_large, hint="; pass a saved bench.json")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise UsageError(f"{where}: not JSON; pass a saved bench.json") from None
    if isinstance(doc, dict) and doc.get("schema_version") == SCHEMA_VERSION:
        return BenchResult.read(path)
    if isinstance(doc, dict) and "aiperf_version" in doc:
        return _result(path, "aiperf " + str(doc.get("aiperf_version")), *aiperf_figures(doc))
    if isinstance(doc, dict) and "mean_ttft_ms" in doc and "completed" in doc:
        return _result(path, "vllm bench serve", *vllm_figures(doc))
    raise UsageError(
        f"{where}: not a {SCHEMA_VERSION} result, an AIPerf profile_export_aiperf.json "
        "or a vllm bench serve --save-result file"
    )


def _number(value: Any) -> float | None:
    """A finite number, or None (a hostile file's strings, NaN or 10**400 are skipped)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _fig(value: float | None, unit: str, method: str) -> Figure | None:
    return figure([value], unit, method) if value is not None else None


def vllm_figures(doc: dict[str, Any]) -> tuple[dict[str, Figure], list[str]]:
    """servekit figures from a ``vllm bench serve --save-result`` file (same definitions)."""
    figures: dict[str, Figure] = {}
    for name in AIPERF_LATENCY:
        for ours, _ in STATS:
            value = _number(doc.get(f"{ours}_{name}_ms"))
            if fig := _fig(value, "ms", f"vllm bench serve {ours}_{name}_ms"):
                figures[f"{name}_{ours}_ms"] = fig
    for name, unit in (
        ("request_throughput", "req/s"),
        ("output_throughput", "tok/s"),
        ("total_token_throughput", "tok/s"),
    ):
        if fig := _fig(_number(doc.get(name)), unit, f"vllm bench serve {name}"):
            figures[name] = fig
    refused = [GOODPUT_WHY] if doc.get("request_goodput") is not None else []
    return figures, refused


def _server_counted(doc: dict[str, Any]) -> bool:
    """Whether AIPerf counted tokens from the server's usage (its input_config says)."""
    return _find(doc.get("input_config"), "use_server_token_count", depth=8) is True


def _find(node: Any, key: str, depth: int) -> Any:
    """The first value of ``key`` in nested dicts (bounded depth: a hostile file ends early)."""
    if depth <= 0 or not isinstance(node, dict):
        return None
    if key in node:
        return node[key]
    for value in node.values():
        found = _find(value, key, depth - 1)
        if found is not None:
            return found
    return None


def aiperf_figures(doc: dict[str, Any]) -> tuple[dict[str, Figure], list[str]]:
    """servekit figures from ``profile_export_aiperf.json``, refusing what differs."""
    server_counted = _server_counted(doc)
    figures: dict[str, Figure] = {}
    refused: list[str] = []
    wanted: list[tuple[str, str, str]] = [(n, k, "ms") for n, k in AIPERF_LATENCY.items()]
    wanted += [(n, k, "rate") for n, k in AIPERF_RATES.items()]
    for name, key, kind in wanted:
        entry = doc.get(key)
        if not isinstance(entry, dict):
            continue
        if name in TOKENIZER_COUNTED and not server_counted:
            refused.append(TOKENS_WHY.format(name=name))
            continue
        if kind == "rate":
            unit = "req/s" if name == "request_throughput" else "tok/s"
            if fig := _fig(_number(entry.get("avg")), unit, f"AIPerf {key} avg"):
                figures[name] = fig
            continue
        for ours, theirs in STATS:
            value = _number(entry.get(theirs))
            if fig := _fig(value, "ms", f"AIPerf {key} {theirs}"):
                figures[f"{name}_{ours}_ms"] = fig
    if "goodput" in doc:
        refused.append(GOODPUT_WHY)
    return figures, refused


def _result(path: Path, tool: str, figures: dict[str, Figure], refused: list[str]) -> BenchResult:
    if not figures:
        raise UsageError(f"--baseline {path}: a {tool} file with no figure servekit can compare")
    point = Point(
        workload=FOREIGN,
        label=tool,
        figures=figures,
        evidence={"file": str(path), "not_compared": refused},
    )
    inputs = BenchInputs(target=str(path), entry_url="", engine=tool, harness=tool)
    return BenchResult(created=f"{tool} file {path.name}", inputs=inputs, points=(point,))
