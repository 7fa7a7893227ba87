"""Benchmark (b): servekit's figures side by side with ``vllm bench serve``.

Both tools measure the same endpoint with the same workload: prompts of ISL
tokens (vLLM's random dataset: random token ids, a few tokens longer after
re-encoding; servekit: exact-length text), OSL output tokens with ignore_eos,
at most C requests in flight, N requests per run, one warm-up request each.
Runs alternate between the two tools, and which goes first alternates too, so
both see the same drift of a shared host; each figure is the median over R
runs of the run's median.

By default the script builds the tiny model (``servekit model tiny``) and
starts a real vLLM CPU server for it; ``--url`` measures a running server
instead (``--tokenizer`` then names a tokenizer folder for vLLM's dataset).
``vllm bench serve`` is called from Python (``add_cli_args`` on a
``FlexibleArgumentParser``, then ``main(args)``), as anchors.md describes.

A second, paired part sends identical prompts through vLLM's own request
function (``async_request_openai_completions``) and servekit's client in
interleaved blocks: with the payload and the moment equalised, what is left is
the clients' timing. A third part runs servekit's client on vLLM's random
prompts and on its own, to show what the prompt content alone changes.

    .venv/bin/python benchmarks/bench_vs_vllm.py [--runs 3] [--requests 40] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from servekit.bench import ConcurrencySweep, RunSettings, run_bench
from servekit.deployment import Deployment

FIGURES = (
    ("TTFT median [ms]", "median_ttft_ms", "ttft_p50_ms"),
    ("TTFT p99 [ms]", "p99_ttft_ms", "ttft_p99_ms"),
    ("ITL median [ms]", "median_itl_ms", "itl_p50_ms"),
    ("TPOT median [ms]", "median_tpot_ms", "tpot_p50_ms"),
    ("E2EL median [ms]", "median_e2el_ms", "e2el_p50_ms"),
    ("output tok/s", "output_throughput", "output_throughput"),
    ("requests/s", "request_throughput", "request_throughput"),
)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, timeout_s: float, proc: subprocess.Popen[bytes] | None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"vLLM exited with {proc.returncode}")
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(url + "/health", timeout=2) as resp,
        ):
            if resp.status == 200:
                return
        time.sleep(1)
    raise RuntimeError(f"{url} not healthy after {timeout_s:.0f} s")


@contextlib.contextmanager
def vllm_server(model_dir: Path, log: Path) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir)]
    argv += ["--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--max-model-len", "2048"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, 900, proc)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


def vllm_bench(
    url: str,
    model: str,
    tokenizer: Path,
    args: argparse.Namespace,
    seed: int,
    *,
    dataset: Path | None = None,
) -> dict[str, Any]:
    """One ``vllm bench serve`` run; ``dataset`` is a JSONL of prompts (else random)."""
    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()  # type: ignore[no-untyped-call]
    serve.add_cli_args(parser)
    argv = ["--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions"]
    argv += ["--model", model, "--tokenizer", str(tokenizer)]
    if dataset is None:
        argv += ["--dataset-name", "random"]
        argv += ["--random-input-len", str(args.isl), "--random-output-len", str(args.osl)]
    else:
        # The same prompts servekit sends (its builder, its exact length), as is.
        argv += ["--dataset-name", "custom", "--dataset-path", str(dataset)]
        argv += ["--skip-chat-template", "--custom-output-len", str(args.osl)]
    argv += ["--num-prompts", str(args.requests), "--max-concurrency", str(args.concurrency)]
    argv += ["--ignore-eos", "--percentile-metrics", "ttft,tpot,itl,e2el"]
    argv += ["--metric-percentiles", "50,99", "--disable-tqdm", "--seed", str(seed)]
    argv += ["--temperature", "0", "--num-warmups", "1", "--save-detailed"]
    ns = parser.parse_args(argv)
    buf = io.StringIO()
    trust = contextlib.nullcontext() if args.vllm_trust_env else _no_trust_env()
    with contextlib.redirect_stdout(buf), _jsonl_without_pandas(), trust:
        return dict(serve.main(ns))


@contextlib.contextmanager
def _no_trust_env() -> Iterator[None]:
    """vLLM's session as shipped but with ``trust_env=False`` (servekit's setting).

    ``trust_env=True`` makes aiohttp look up proxy variables and ~/.netrc for
    every request, between the start stamp and the send: measured 94 us of
    client CPU per request here, inside each TTFT.
    """
    import aiohttp

    original = aiohttp.ClientSession

    def session(*a: Any, **kw: Any) -> aiohttp.ClientSession:
        kw["trust_env"] = False
        return original(*a, **kw)

    aiohttp.ClientSession = session  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        aiohttp.ClientSession = original  # type: ignore[misc]


@contextlib.contextmanager
def _jsonl_without_pandas() -> Iterator[None]:
    """vLLM's custom dataset reads JSONL with pandas, which the vllm-cpu install lacks.

    Same result without it: one dict per line, then vLLM's own seeded shuffle.
    """
    import random

    from vllm.benchmarks.datasets.datasets import CustomDataset

    def load_data(self: Any) -> None:
        lines = Path(self.dataset_path).read_text().splitlines()
        self.data = [json.loads(line) for line in lines if line.strip()]
        random.seed(self.random_seed)
        if not getattr(self, "disable_shuffle", False):
            random.shuffle(self.data)

    original = CustomDataset.load_data
    CustomDataset.load_data = load_data  # type: ignore[method-assign]
    try:
        yield
    finally:
        CustomDataset.load_data = original  # type: ignore[method-assign]


async def servekit_prompts(url: str, model: str, isl: int, n: int, tag: str) -> list[str]:
    """``n`` prompts from servekit's own builder (exact ISL, unique prefixes)."""
    from servekit.bench.prompts import PromptBuilder
    from servekit.client import OpenAIClient

    async with OpenAIClient(url, model=model, keep_frames=False, keep_body=False) as client:
        return await PromptBuilder(client, tag=tag).build_many(isl, n)


def write_dataset(prompts: list[str], path: Path) -> Path:
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    return path


def prefix_hits(url: str) -> float:
    """vLLM's prefix-cache hit counter (tokens), to show no run was served from cache."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:prefix_cache_hits_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def servekit_bench(url: str, args: argparse.Namespace) -> dict[str, Any]:
    spec = ConcurrencySweep(
        concurrencies=(args.concurrency,),
        requests=args.requests,
        input_tokens=args.isl,
        output_tokens=args.osl,
    )
    result = run_bench(Deployment(entry_url=url), [spec], RunSettings(runs=1, warmup=1))
    (point,) = result.points
    out = {name: fig.median for name, fig in point.figures.items()}
    out["errors"] = point.errors
    return out


async def paired(
    url: str, model: str, args: argparse.Namespace
) -> dict[str, dict[str, list[float]]]:
    """Identical prompts through vLLM's request function and servekit's client.

    Both tools' clients send the same servekit prompts, in interleaved blocks
    of ``--block`` requests at concurrency C, so the only difference left is
    the client: its timestamps and its per-frame work.
    """
    import aiohttp
    from vllm.benchmarks.lib.endpoint_request_func import (
        RequestFuncInput,
        async_request_openai_completions,
    )

    from servekit.bench.load import run_concurrent, stream_body
    from servekit.bench.prompts import PromptBuilder
    from servekit.client import OpenAIClient

    out: dict[str, dict[str, list[float]]] = {
        t: {"ttft": [], "itl": [], "e2el": []} for t in ("vllm", "servekit")
    }
    async with OpenAIClient(url, model=model, keep_frames=False, keep_body=False) as client:
        prompts = await PromptBuilder(client, start_id=90000).build_many(
            args.isl, 2 * args.block * args.rounds
        )
        gate = asyncio.Semaphore(args.concurrency)
        async with aiohttp.ClientSession() as session:

            async def theirs(prompt: str) -> None:
                inp = RequestFuncInput(
                    prompt=prompt,
                    api_url=url + "/v1/completions",
                    prompt_len=args.isl,
                    output_len=args.osl,
                    model=model,
                    ignore_eos=True,
                    extra_body={"temperature": 0},
                )
                async with gate:
                    r = await async_request_openai_completions(inp, session)
                if r.success:
                    out["vllm"]["ttft"].append(r.ttft * 1000)
                    out["vllm"]["itl"] += [x * 1000 for x in r.itl]
                    out["vllm"]["e2el"].append(r.latency * 1000)

            for i in range(args.rounds):
                order = ("vllm", "servekit") if i % 2 == 0 else ("servekit", "vllm")
                for tool in order:
                    block = [prompts.pop() for _ in range(args.block)]
                    if tool == "vllm":
                        await asyncio.gather(*(theirs(p) for p in block))
                        continue
                    bodies = [stream_body(p, args.osl, model) for p in block]
                    recs, _ = await run_concurrent(client, bodies, args.concurrency)
                    for r in recs:
                        if r.ok and r.ttft_ns is not None:
                            out["servekit"]["ttft"].append(r.ttft_ns / 1e6)
                            out["servekit"]["itl"] += [g / 1e6 for g in r.itl_ns]
                            out["servekit"]["e2el"].append(r.latency_ns / 1e6)
    return out


async def payload_check(
    url: str, model: str, tokenizer: Path, args: argparse.Namespace
) -> dict[str, list[tuple[float, float, float]]]:
    """servekit's client on vLLM's random-dataset prompts vs on servekit's prompts.

    Isolates what the prompt content does to the server (the generated tokens
    differ, and so does the work of detokenizing them).
    """
    from vllm.benchmarks.datasets.datasets import RandomDataset
    from vllm.tokenizers.registry import get_tokenizer

    from servekit.bench.load import run_concurrent, stream_body
    from servekit.bench.prompts import PromptBuilder
    from servekit.bench.stats import serving_metrics
    from servekit.client import OpenAIClient

    n = args.block * 5 * args.rounds
    with contextlib.redirect_stdout(io.StringIO()):
        samples = RandomDataset(random_seed=0).sample(
            get_tokenizer(str(tokenizer)), n, input_len=args.isl, output_len=args.osl
        )
    pools = {"vllm random prompts": [str(x.prompt) for x in samples]}
    res: dict[str, list[tuple[float, float, float]]] = {}
    async with OpenAIClient(url, model=model, keep_frames=False, keep_body=False) as client:
        pools["servekit prompts"] = await PromptBuilder(client, start_id=70000).build_many(
            args.isl, n
        )
        for i in range(args.rounds):
            order = sorted(pools, reverse=i % 2 == 1)
            for name in order:
                block = [pools[name].pop() for _ in range(args.block * 5)]
                bodies = [stream_body(p, args.osl, model) for p in block]
                recs, dur = await run_concurrent(client, bodies, args.concurrency)
                m = serving_metrics(recs, dur, args.isl, {})
                res.setdefault(name, []).append(
                    (
                        m["ttft_p50_ms"] or 0.0,
                        m["itl_p50_ms"] or 0.0,
                        m["request_throughput"] or 0.0,
                    )
                )
    return res


def print_payload(res: dict[str, list[tuple[float, float, float]]]) -> None:
    print("\npayload check: servekit's client, C=4, vLLM's random prompts vs servekit's")
    for name, rows in res.items():
        ttft, itl, rps = np.median(np.asarray(rows), axis=0)
        print(f"{name:<22} TTFT p50 {ttft:8.3f} ms   ITL p50 {itl:7.3f} ms   {rps:7.1f} req/s")


def print_paired(res: dict[str, dict[str, list[float]]], args: argparse.Namespace) -> float:
    print(
        f"\npaired clients: identical prompts, C={args.concurrency}, "
        f"{args.rounds} interleaved blocks of {args.block} requests per client"
    )
    print(f"{'figure':<20}{'vLLM client':>14}{'servekit':>12}{'ratio':>8}  within 5%")
    worst = 0.0
    for name in ("ttft", "itl", "e2el"):
        v, s = float(np.median(res["vllm"][name])), float(np.median(res["servekit"][name]))
        worst = max(worst, abs(s / v - 1))
        ok = "yes" if abs(s / v - 1) <= 0.05 else "NO"
        print(f"{name + ' median [ms]':<20}{v:>14.3f}{s:>12.3f}{s / v:>8.3f}  {ok}")
    n = len(res["vllm"]["e2el"]), len(res["servekit"]["e2el"])
    print(f"completed requests: vllm client {n[0]}, servekit {n[1]}")
    return worst


def measured(fn: Any, url: str) -> dict[str, Any]:
    """Run one tool once, with the host load before it and the cache hits during it."""
    load = os.getloadavg()
    hits = prefix_hits(url)
    out = dict(fn())
    out["prefix_hits"] = prefix_hits(url) - hits
    out["load"] = load
    if "itls" in out:  # vLLM's own per-request lists: prompt lengths, merged frames
        gaps = [g for itl in out["itls"] for g in itl]
        out["merged_frames"] = sum(g < 1e-4 for g in gaps) / max(len(gaps), 1)
        out["mean_input_len"] = float(np.mean(out["input_lens"]))
    return out


def compare(url: str, tokenizer: Path, model: str, args: argparse.Namespace) -> int:
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-vs-vllm-"))
    for i in range(args.runs):
        data: Path | None = None
        if args.dataset == "servekit":
            tag = secrets.token_hex(3)
            prompts = asyncio.run(servekit_prompts(url, model, args.isl, args.requests, tag))
            data = write_dataset(prompts, tmp / f"run{i}.jsonl")

        def vllm_run(seed: int = i, data: Path | None = data) -> dict[str, Any]:
            return vllm_bench(url, model, tokenizer, args, seed, dataset=data)

        def ours_run(seed: int = i, data: Path | None = data) -> dict[str, Any]:
            if not args.control:
                return servekit_bench(url, args)
            # A/A control: vLLM's tool again in servekit's slot, its figures renamed.
            r = vllm_bench(url, model, tokenizer, args, seed + 1000, dataset=data)
            out = {s: r[v] for _, v, s in FIGURES}
            return {**out, "errors": r["failed"], "harness_loop_lag_p99_ms": 0.0}

        # Alternate which tool goes first so neither always meets a warmer host.
        if i % 2 == 0:
            theirs.append(measured(vllm_run, url))
            ours.append(measured(ours_run, url))
        else:
            ours.append(measured(ours_run, url))
            theirs.append(measured(vllm_run, url))
        v, o = theirs[-1], ours[-1]
        print(
            f"run {i + 1}/{args.runs} (load {v['load'][0]:.2f}/{o['load'][0]:.2f}): "
            f"vllm {v['request_throughput']:.1f} req/s, TTFT p50 {v['median_ttft_ms']:.2f} ms, "
            f"ITL p50 {v['median_itl_ms']:.3f} ms, cache hits {v['prefix_hits']:.0f}, "
            f"ISL {v['mean_input_len']:.1f}, ITL<0.1ms {v['merged_frames']:.1%} | "
            f"servekit {o['request_throughput']:.1f} req/s, TTFT p50 {o['ttft_p50_ms']:.2f} ms, "
            f"ITL p50 {o['itl_p50_ms']:.3f} ms, cache hits {o['prefix_hits']:.0f}, "
            f"harness lag p99 {o['harness_loop_lag_p99_ms']:.2f} ms",
            flush=True,
        )
    prompts_desc = {
        "servekit": "servekit's prompts for both (vLLM: --dataset-name custom)",
        "random": "vLLM's random token ids for vLLM, servekit's text for servekit",
    }[args.dataset]
    print(
        f"\nworkload: ISL {args.isl} / OSL {args.osl}, C={args.concurrency}, "
        f"{args.requests} requests per run, {args.runs} runs; prompts: {prompts_desc}"
    )
    print(
        f"{'figure':<20}{'vllm bench serve':>18}{'servekit':>12}{'ratio':>8}"
        f"{'paired ratio (min-max)':>26}  within 5%"
    )
    worst = 0.0
    for label, vkey, skey in FIGURES:
        v_med = float(np.median([r[vkey] for r in theirs]))
        s_med = float(np.median([r[skey] for r in ours]))
        ratio = s_med / v_med if v_med else float("nan")
        pairs = [o[skey] / v[vkey] for o, v in zip(ours, theirs, strict=True)]
        gated = "p99" not in label
        if gated:
            worst = max(worst, abs(ratio - 1))
        ok = ("yes" if abs(ratio - 1) <= 0.05 else "NO") + ("" if gated else " (info)")
        spread = f"{np.median(pairs):.3f} ({min(pairs):.3f}-{max(pairs):.3f})"
        print(f"{label:<20}{v_med:>18.3f}{s_med:>12.3f}{ratio:>8.3f}{spread:>26}  {ok}")
    failed = sum(r["failed"] for r in theirs), sum(r["errors"] for r in ours)
    loads = [r["load"][0] for r in theirs + ours]
    print(
        f"failed requests: vllm {failed[0]}, servekit {failed[1]}; "
        f"worst median deviation {worst * 100:.1f}%; load average (1 min) during runs "
        f"{min(loads):.2f}-{max(loads):.2f}"
    )
    if args.json:
        keep = [k for _, k, _ in FIGURES] + ["prefix_hits", "load", "failed"]
        keep += ["merged_frames", "mean_input_len"]
        dump = {
            "args": {k: str(v) for k, v in vars(args).items()},
            "vllm": [{k: r.get(k) for k in keep} for r in theirs],
            "servekit": [
                {k: r.get(k) for k in [s for _, _, s in FIGURES] + ["prefix_hits", "load"]}
                for r in ours
            ],
        }
        args.json.write_text(json.dumps(dump, indent=1))
    worst_paired = 0.0
    if args.paired:
        worst_paired = print_paired(asyncio.run(paired(url, model, args)), args)
        print_payload(asyncio.run(payload_check(url, model, tokenizer, args)))
    return 0 if max(worst, worst_paired) <= 0.05 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", help="measure this running server instead of starting vLLM")
    ap.add_argument("--tokenizer", type=Path, help="tokenizer folder for --url")
    ap.add_argument("--model-dir", type=Path, help="tiny model folder (built when absent)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--isl", type=int, default=128)
    ap.add_argument("--osl", type=int, default=32)
    ap.add_argument("--block", type=int, default=20, help="paired: requests per block")
    ap.add_argument("--rounds", type=int, default=8, help="paired: blocks per client")
    ap.add_argument(
        "--dataset",
        choices=("servekit", "random"),
        default="servekit",
        help="servekit: both tools send servekit's prompts; random: vLLM its random dataset",
    )
    ap.add_argument("--paired", action="store_true", help="also the paired-client parts")
    ap.add_argument(
        "--vllm-trust-env",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="vLLM's session as shipped (trust_env=True); --no-vllm-trust-env turns it off",
    )
    ap.add_argument(
        "--control",
        action="store_true",
        help="A/A control: run vllm bench serve in servekit's slot too (the noise floor)",
    )
    ap.add_argument("--pin", help="pin this process (both clients) to these CPUs, e.g. 0")
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    args = ap.parse_args()
    if args.pin:
        os.sched_setaffinity(0, {int(c) for c in args.pin.split(",")})
    print(f"host load {os.getloadavg()}, clients on CPUs {sorted(os.sched_getaffinity(0))}")
    if args.url:
        if args.tokenizer is None:
            ap.error("--url needs --tokenizer")
        model = urllib.request.urlopen(args.url + "/v1/models").read()
        name = json.loads(model)["data"][0]["id"]
        return compare(args.url.rstrip("/"), args.tokenizer, name, args)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model_dir or Path(tmp) / "tiny"
        if not (model_dir / "config.json").is_file():
            subprocess.run(
                [sys.executable, "-m", "servekit", "model", "tiny", "--out", str(model_dir)],
                check=True,
            )
        log = Path(tmp) / "vllm.log"
        t0 = time.monotonic()
        with vllm_server(model_dir, log) as url:
            print(f"vLLM CPU ready at {url} after {time.monotonic() - t0:.0f} s", flush=True)
            return compare(url, model_dir, "tiny", args)


if __name__ == "__main__":
    raise SystemExit(main())
