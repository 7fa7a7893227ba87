"""Calibration: measure one engine of each role (or read what was measured) and fit it.

Three sources, all measurements: a short calibration run against a live engine
(``--target``: ``servekit bench`` workloads chosen to span batch sizes, prompt
lengths and prefix hits, plus a probe that reads how many sequences the engine
runs at once), ``servekit bench`` results already on disk (``--from-bench``),
or the bench results of a layout's ledger record (``--from-ledger``). A PD pair
behind servekit's proxy (``--pair``) adds the KV hand-off. Each run adds or
replaces one engine's fit in ``DIR/calibration.json``, so a prefill engine, a
decode engine and a pair can be calibrated one after another into one folder;
the bench results it fitted on are kept beside it, and every fit names them.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from servekit.advise.fit import (
    CHUNKS,
    fit_decode,
    fit_prefill,
    fit_transfer,
    prefill_seconds,
    running_limit,
)
from servekit.advise.model import (
    CALIBRATION_FILE,
    Calibration,
    EngineFit,
    PrefillFit,
    TransferFit,
    read_calibration,
)
from servekit.advise.observe import Observations, PrefillObs, observations_of, read_bench_dir
from servekit.advise.options import AdviseCalibrateOptions
from servekit.advise.shapes import parse_shape
from servekit.errors import UsageError
from servekit.vocabulary import ServedBy, atomic_write_text

SAMPLE_S = 0.05
PROBE_STEPS = 40
PAIR_RUNS = 3
PROBES_FILE = "probes.json"
PROBE_MAX_TOKENS = 4096
DEFAULT_BLOCK = 16


def _stamp() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _engine_kind(engines: set[str]) -> ServedBy:
    if engines == {"sim"}:
        return "sim"
    if engines == {"vllm"}:
        return "vllm"
    return "external"


def ladder(top: int, steps: int = 5) -> tuple[int, ...]:
    """Prompt lengths for the prefill fit: ``top``, ``top/4``, ... (at least 64)."""
    return tuple(sorted({max(64, top >> (2 * k)) for k in range(steps)}))


def engine_workloads(opts: AdviseCalibrateOptions, max_prompt: int) -> list[object]:
    """What one engine is measured with: decode batches, a second context, prefill lengths."""
    from servekit.bench import KVCapacity, MultiStream, Prefill

    batches = tuple(b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= opts.max_batch)
    lengths = ladder(max_prompt)
    return [
        KVCapacity(),
        MultiStream(streams=batches, input_tokens=opts.decode_isl, output_tokens=opts.decode_osl),
        # the context slope from one stream: several streams at a long prompt would
        # decode beside each other's prefill chunks, which is not a context effect
        MultiStream(streams=(1,), input_tokens=max_prompt, output_tokens=opts.decode_osl),
        *(Prefill(streams=(1,), prompt_tokens=n) for n in lengths),
        Prefill(streams=(4,), prompt_tokens=lengths[len(lengths) // 2]),
    ]


def prefix_trace(path: Path, max_prompt: int, gap_s: float, requests: int = 12) -> Path:
    """A sequential trace whose prompts share 0-100% of their leading 512-token blocks."""
    block = 512
    blocks = max(2, min(16, max_prompt // block))
    rows: list[dict[str, int | list[int]]] = []
    fresh = 1000
    for i in range(requests):
        shared = (i * blocks) // requests if i % 2 else 0
        ids = list(range(shared)) + list(range(fresh, fresh + blocks - shared))
        fresh += blocks - shared
        rows.append(
            {
                "timestamp": round(i * gap_s * 1000),
                "input_length": blocks * block,
                "output_length": 2,
                "hash_ids": ids,
            }
        )
    rows.insert(1, {**rows[0], "timestamp": round(0.5 * gap_s * 1000)})  # a 100% hit
    rows.sort(key=lambda r: int(r["timestamp"]))  # type: ignore[arg-type]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


async def _max_model_len(url: str) -> int | None:
    """The served model's context length as /v1/models reports it (vLLM and the simulator do)."""
    from servekit.client import OpenAIClient

    async with OpenAIClient(url, timeout_s=30) as client:
        rec = await client.request("GET", "/v1/models")
    body = rec.json_body() if rec.ok else None
    data = body.get("data") if isinstance(body, dict) else None
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    value = first.get("max_model_len")
    return value if isinstance(value, int) and value > 0 else None


async def _chunk_probe(
    url: str, model: str, prompt_tokens: int, stream_tokens: int, pause_s: float
) -> tuple[list[float], float]:
    """(gaps between a decoding stream's frames while a long prompt is prefilled beside it,
    the long prompt's TTFT), in the client's seconds.

    A chunked-prefill engine runs the long prompt in steps of its token budget, each
    also carrying the stream's decode step, so the stream's longest gaps are whole
    chunks: how large a chunk is follows from the prefill fit.
    """
    from servekit.client import OpenAIClient

    common: dict[str, object] = {"ignore_eos": True, "temperature": 0}
    stream = {**common, "max_tokens": stream_tokens, "min_tokens": stream_tokens, "stream": True}
    async with OpenAIClient(url, model=model, timeout_s=600) as client:
        first = asyncio.create_task(client.completion({**stream, "prompt": "[chunk-probe] the"}))
        await asyncio.sleep(pause_s)
        long = {**common, "max_tokens": 1, "stream": True}
        long["prompt"] = "[chunk-probe-long]" + " the" * prompt_tokens
        second = await client.completion(long)
        ran = await first
    if not second.ok or not ran.ok or not second.token_times_ns:
        return [], 0.0
    start, end = second.t_start_ns, second.token_times_ns[0]
    times = [t for t in ran.token_times_ns if start <= t <= end + 1]
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(times)]
    return gaps, (end - start) / 1e9


def chunk_from_gaps(
    gaps: list[float], ttft_s: float, prompt_tokens: int, prefill: PrefillFit, step_s: float
) -> int | None:
    """The chunk size the stream's gaps show (None: one chunk, or nothing to read)."""
    long = sorted(g for g in gaps if g > 2 * step_s + prefill.overhead_s)
    if len(long) < 2 or prefill.per_token_s <= 0 or ttft_s <= 0:
        return None
    full = long[len(long) // 2 :]  # the full chunks; the last one may be partial
    chunk = (sum(full) / len(full) - step_s - prefill.overhead_s) / prefill.per_token_s
    if chunk <= 0 or chunk >= prompt_tokens:
        return None
    return min(CHUNKS, key=lambda c: abs(math.log(c / chunk)))


async def _probe(url: str, model: str, n: int, osl: int) -> tuple[int, int | None]:
    """(most sequences seen running at once, block size) while ``n`` requests run."""
    from servekit.client import OpenAIClient
    from servekit.vocabulary import CACHE_CONFIG_INFO, NUM_REQUESTS_RUNNING

    async with OpenAIClient(url, model=model, timeout_s=600) as client:
        snap = await client.metrics()
        block = None
        for labels in snap.info.get(CACHE_CONFIG_INFO, ()):
            if str(labels.get("block_size", "")).isdigit():
                block = int(labels["block_size"])
        body = {"max_tokens": osl, "min_tokens": osl, "ignore_eos": True, "temperature": 0}
        sends = [
            asyncio.create_task(client.completion({**body, "prompt": f"[probe-{i}] the the the"}))
            for i in range(n)
        ]
        peak = 0
        while not all(t.done() for t in sends):
            peak = max(peak, int((await client.metrics()).gauge(NUM_REQUESTS_RUNNING) or 0))
            await asyncio.sleep(SAMPLE_S)
        await asyncio.gather(*sends)
    return peak, block


@dataclass(frozen=True)
class Probed:
    """What the probes read off the live engine: most sequences at once, block, chunk."""

    peak: int | None = None
    block: int | None = None
    chunk: int | None = None


def _measure(opts: AdviseCalibrateOptions, folder: Path) -> tuple[list[Path], Probed]:
    """Run the calibration workloads and probes against ``--target``."""
    from servekit.bench import RunSettings, TraceReplay, run_workloads, write_outputs
    from servekit.deployment import load_deployment

    assert opts.target is not None
    dep = load_deployment(opts.target)
    settings = RunSettings(runs=opts.runs, warmup=1)
    served = asyncio.run(_max_model_len(dep.entry_url))
    max_prompt = opts.max_prompt
    if served is not None:
        max_prompt = max(64, min(max_prompt, served - opts.decode_osl - 16))
    first = run_workloads(dep, engine_workloads(opts, max_prompt), settings, target=opts.target)  # type: ignore[arg-type]
    out = [folder / "engine"]
    write_outputs(first, out[0])
    seen = observations_of(first, list(first.requests), str(out[0]))
    prefill, decode = fit_prefill(seen.prefill), fit_decode(seen.decode, None)
    scale = first.inputs.sim_speed or 1.0  # engine seconds per wall second
    # requests of the prefix trace must run alone: a gap of three times the longest one
    longest = max(o.prompts[0] for o in seen.prefill)
    alone = prefill_seconds(prefill, PrefillObs((longest,), (0,), 0.0, "")) + 2 * decode.step_s(1)
    trace = prefix_trace(folder / "prefix-trace.jsonl", max_prompt, (3 * alone + 0.02) / scale)
    second = run_workloads(dep, [TraceReplay(path=str(trace))], settings, target=opts.target)
    out.append(folder / "prefix")
    write_outputs(second, out[1])
    pause = max(0.2, 5 * decode.step_s(1))
    stream = (pause + 3 * alone + 0.5) / decode.step_s(1) * decode.acceptance_length + 8
    stream = min(stream, PROBE_MAX_TOKENS, (served or PROBE_MAX_TOKENS) - 64)
    gaps, long_ttft = asyncio.run(
        _chunk_probe(
            dep.entry_url, first.inputs.model or "", max_prompt, int(stream), pause / scale
        )
    )
    chunk = chunk_from_gaps(
        [g * scale for g in gaps], long_ttft * scale, max_prompt, prefill, decode.step_s(1)
    )
    # the probe's requests last PROBE_STEPS steps: many samples of a steady batch
    tokens = PROBE_STEPS * decode.acceptance_length
    osl = int(min(max(opts.decode_osl, tokens), PROBE_MAX_TOKENS))
    if served is not None:
        osl = max(2, min(osl, served - 64))
    model = first.inputs.model or ""
    peak, block = asyncio.run(_probe(dep.entry_url, model, opts.max_batch, osl))
    probed = Probed(peak, block, chunk)
    atomic_write_text(
        folder / PROBES_FILE,
        json.dumps({**asdict(probed), "chunk_gaps_s": gaps, "probe_tokens": osl}, indent=1),
    )
    return out, probed


def read_probes(folders: list[Path]) -> Probed:
    """The probes a calibration run wrote beside its bench folders (none: nothing probed)."""
    for folder in folders:
        path = folder.parent / PROBES_FILE
        if path.is_file():
            try:
                doc = json.loads(path.read_text()[:100_000])
                return Probed(
                    *(doc.get(k) if isinstance(doc.get(k), int) else None
                      for k in ("peak", "block", "chunk"))
                )  # fmt: skip
            except ValueError:
                return Probed()
    return Probed()


def _observations(folders: list[Path], flag: str) -> Observations:
    obs = Observations()
    for path in folders:
        result, rows = read_bench_dir(path, flag)
        obs.extend(observations_of(result, rows, str(path)))
    return obs


def ledger_folders(layout: str, catalog: Path | None) -> list[Path]:
    """The bench results of the layout's newest ledger record that still has them."""
    from servekit.catalog import ledger_records, load

    records = ledger_records(load(layout, catalog))
    for record in reversed(records):
        bench = Path(record.report) / "bench"
        if (bench / "bench.json").is_file():
            return [bench]
    raise UsageError(
        f"--from-ledger {layout}: no ledger record whose report still holds bench/bench.json; "
        "run 'servekit verify' or pass --from-bench"
    )


def fit_engine(
    name: str, shapes: tuple[str, ...], obs: Observations, probed: Probed | None = None
) -> EngineFit:
    """One engine's fit from its observations."""
    for text in shapes:
        parse_shape(text)
    if not obs.kv_tokens:
        raise UsageError(
            "calibration: no KV capacity measured; include the kv workload "
            "(servekit bench --workload kv)"
        )
    probed = probed or Probed()
    return EngineFit(
        name=name,
        shapes=shapes,
        engine=_engine_kind(obs.engines),
        sources=tuple(dict.fromkeys(obs.sources)),
        block_size=probed.block or DEFAULT_BLOCK,
        kv_capacity_tokens=max(obs.kv_tokens),
        prefill=fit_prefill(obs.prefill, probed.chunk),
        decode=fit_decode(obs.decode, running_limit(probed.peak, obs.decode)),
    )


def _existing(out: Path) -> Calibration | None:
    return read_calibration(out, "--out") if (out / CALIBRATION_FILE).is_file() else None


def run_calibrate(opts: AdviseCalibrateOptions) -> Calibration:
    """``servekit advise calibrate``: measure or read, fit, and merge into ``--out``."""
    out = opts.out
    old = _existing(out)
    engines = list(old.engines) if old else []
    transfer = old.transfer if old else None
    notes = list(old.notes) if old else []
    name = opts.name or opts.target or opts.from_ledger or "engine"
    if opts.target or opts.from_bench or opts.from_ledger:
        folder = out / "runs" / f"{time.strftime('%Y%m%dT%H%M%S')}-{_slug(name)}"
        probed = Probed()
        if opts.target:
            folder.mkdir(parents=True, exist_ok=True)
            folders, probed = _measure(opts, folder)
        elif opts.from_ledger:
            folders = ledger_folders(opts.from_ledger, opts.catalog)
        else:
            folders = list(opts.from_bench)
            probed = read_probes(folders)
        fit = fit_engine(name, opts.shape, _observations(folders, "--from-bench"), probed)
        engines = [e for e in engines if e.name != fit.name] + [fit]
    if opts.pair or opts.pair_bench:
        pair_folders = list(opts.pair_bench)
        if opts.pair:
            pair_folders.append(_measure_pair(opts, out))
        transfer = _transfer(engines, _observations(pair_folders, "--pair-bench"))
    if not engines:
        raise UsageError("--out: no engine calibrated yet; calibrate an engine (--target) first")
    cal = Calibration(
        created=_stamp(),
        engines=tuple(engines),
        notes=tuple(notes),
        **({"transfer": transfer} if transfer is not None else {}),
    )
    cal.write(out)
    return cal


def _measure_pair(opts: AdviseCalibrateOptions, out: Path) -> Path:
    """Single prefills through a PD pair behind the proxy, at the ladder's lengths."""
    from servekit.bench import Prefill, RunSettings, run_workloads, write_outputs
    from servekit.deployment import load_deployment

    assert opts.pair is not None
    dep = load_deployment(opts.pair)
    specs = [Prefill(streams=(1,), prompt_tokens=n) for n in ladder(opts.max_prompt)]
    # three runs a point: the pair is cheap, and its difference from the fits is small
    runs = max(opts.runs, PAIR_RUNS)
    result = run_workloads(dep, specs, RunSettings(runs=runs, warmup=1), target=opts.pair)
    folder = out / "runs" / f"{time.strftime('%Y%m%dT%H%M%S')}-pair-{_slug(opts.pair)}"
    write_outputs(result, folder)
    return folder


def _transfer(engines: list[EngineFit], pair: Observations) -> TransferFit:
    """The hand-off from the pair's TTFTs, less the prefill and decode fits of its roles."""

    def standing(*roles: str) -> EngineFit:
        for role in roles:
            for fit in engines:
                if any(s.startswith(f"{role}:") for s in fit.shapes):
                    return fit
        raise UsageError(
            "--pair: calibrate the pair's engines first (--target with --shape prefill:... "
            "and decode:..., or one mixed engine)"
        )

    prefill = standing("prefill", "mixed")
    decode = standing("decode", "mixed")
    return fit_transfer(pair.prefill, prefill.prefill, decode.decode)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text)[:60].strip("-") or "engine"
