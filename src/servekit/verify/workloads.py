"""From a layout's ``verify:`` block to benchmark workloads and acceptance contexts.

Layouts name workloads in words (``single-stream``, ``multi-stream``,
``prefill``); the bench package has one model per workload. A verify run always
adds KV capacity (the verification table has a row for it). Quick mode, the
default on simulated engines, keeps prompts short and runs each figure once so
a dry run of a real catalog layout finishes in a couple of minutes on 2 cores.
"""

from __future__ import annotations

from servekit.bench import (
    ConcurrencySweep,
    KVCapacity,
    MultiStream,
    Prefill,
    RateSweep,
    RunSettings,
    SingleStream,
    Workload,
)
from servekit.catalog import VERIFY_WORKLOADS, Layout
from servekit.errors import UsageError

QUICK_ISL = 128
QUICK_OSL = 32
QUICK_CONTEXTS = ("2k",)
FULL_CONTEXTS = ((147456, "144k"), (1048576, "1m"))


def _one(name: str, layout: Layout, quick: bool) -> Workload:
    conc = layout.verify.concurrency
    isl, osl = (QUICK_ISL, QUICK_OSL) if quick else (1024, 256)
    if name == "single-stream":
        interval = 0.05 if quick else 0.25
        return SingleStream(prompt_tokens=isl, output_tokens=osl, sample_interval_s=interval)
    if name == "multi-stream":
        return MultiStream(streams=conc, input_tokens=isl, output_tokens=osl)
    if name == "prefill":
        streams = (1, 2) if quick else (1, 2, 4)
        return Prefill(streams=streams, prompt_tokens=isl * 2 if quick else 1024)
    if name == "concurrency-sweep":
        return ConcurrencySweep(concurrencies=conc, input_tokens=isl, output_tokens=osl)
    if name == "rate-sweep":
        return RateSweep(input_tokens=isl, output_tokens=osl, requests=8 if quick else 32)
    if name == "kv-capacity":
        return KVCapacity()
    raise UsageError(
        f"{layout.name}: verify.workloads has unknown workload {name!r}; "
        f"use one of {', '.join(VERIFY_WORKLOADS)}"
    )


def workloads_for(layout: Layout, quick: bool) -> tuple[Workload, ...]:
    """The layout's declared workloads, then KV capacity (once)."""
    names = list(layout.verify.workloads)
    if "kv-capacity" not in names:
        names.append("kv-capacity")
    return tuple(_one(n, layout, quick) for n in names)


def settings_for(quick: bool) -> RunSettings:
    """Three runs per figure normally; one in quick mode."""
    return RunSettings(runs=1, warmup=1) if quick else RunSettings()


def contexts_for(layout: Layout, quick: bool) -> tuple[str, ...]:
    """Acceptance contexts: declared ones, else 144k/1m where they fit, else 2k."""
    if layout.verify.contexts:
        return tuple(layout.verify.contexts)
    if quick:
        return QUICK_CONTEXTS
    limit = layout.model.max_model_len
    if limit is None:  # the engine's default: each context is tried, and skipped by the
        # acceptance check, naming it, where the engine's /v1/models says it does not fit
        return (*QUICK_CONTEXTS, *(label for _, label in FULL_CONTEXTS))
    fits = tuple(label for size, label in FULL_CONTEXTS if size <= limit)
    return fits or QUICK_CONTEXTS
