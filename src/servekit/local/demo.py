"""``servekit demo``: real PD on the CPU, checked against a single instance.

Builds the tiny model, starts local/1p1d (prefill + decode through vLLM's
NixlConnector, the decoder pulling the prompt's KV over UCX on loopback, the proxy
in front) and local/single (the reference) side by side, sends the same greedy
requests to both, and shows that the PD answers equal the single instance's byte
for byte while the decoder computed none of the prompts itself: its
``vllm:prompt_tokens_by_source`` grows by exactly the prompt tokens sent under
``external_kv_transfer`` and by 0 under ``local_compute`` (a decoder that silently
re-ran the prefill would answer the same text, so the answers alone prove
nothing). Then it says where the records are and stops everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.table import Table

from servekit.accept import SOURCES, metric_labelled
from servekit.catalog import load
from servekit.client import OpenAIClient
from servekit.local.control import follow, report_detached, start_detached, stop_run
from servekit.local.display import ProgressView
from servekit.local.options import UpOptions
from servekit.local.prepare import prepare_run
from servekit.local.rundir import RunDir
from servekit.local.runspec import RunSpec
from servekit.local.tinymodel import build_tiny_model
from servekit.local.tinymodel.ondemand import check_out
from servekit.local.tinymodel.tokenizer import corpus_text
from servekit.vocabulary import BY_SOURCE_SERIES

PD_LAYOUT = "local/1p1d"
REFERENCE_LAYOUT = "local/single"
EXTERNAL, LOCAL = SOURCES
MAX_TOKENS = 32


def demo_requests() -> list[tuple[str, dict[str, Any]]]:
    """(kind, body) pairs: long completions from the shipped text and one long chat."""
    words = corpus_text().split()
    bodies: list[tuple[str, dict[str, Any]]] = []
    for start in (0, 400, 800):
        prompt = " ".join(words[start : start + 260])
        bodies.append(("completion", {"prompt": prompt}))
    question = " ".join(words[1200:1460]) + "\nWhat is this text about?"
    bodies.append(("chat", {"messages": [{"role": "user", "content": question}]}))
    for _, body in bodies:
        body.update({"max_tokens": MAX_TOKENS, "temperature": 0})
    return bodies


@dataclass(frozen=True)
class Outcome:
    kind: str
    prompt_tokens: int | None
    pd_text: str
    single_text: str
    error: str | None

    @property
    def equal(self) -> bool:
        return self.error is None and self.pd_text.encode() == self.single_text.encode()


async def _one(pd: OpenAIClient, ref: OpenAIClient, kind: str, body: dict[str, Any]) -> Outcome:
    send_pd, send_ref = (pd.chat, ref.chat) if kind == "chat" else (pd.completion, ref.completion)
    a = await send_pd(dict(body))
    b = await send_ref(dict(body))
    error = a.error or b.error
    tokens = a.usage.prompt_tokens if a.usage else None
    return Outcome(kind, tokens, a.text, b.text, error)


async def _by_source(url: str) -> dict[str, float]:
    """The decoder's prompt tokens so far by source (0 where vLLM shows none yet)."""
    async with OpenAIClient(url) as client:
        text = await client.metrics_text()
    return {s: metric_labelled(text, BY_SOURCE_SERIES, "source", s) or 0.0 for s in SOURCES}


@dataclass(frozen=True)
class Handoff:
    """What the decoder's metrics say about the demo's prompts."""

    sent: int
    external: float
    local: float

    @property
    def ok(self) -> bool:
        """Every prompt token came over the transfer, none was computed by the decoder."""
        return self.sent > 0 and self.external == self.sent and self.local == 0


async def compare(pd: RunSpec, ref: RunSpec, decode_url: str) -> tuple[list[Outcome], Handoff]:
    """Send every demo request to both; returns outcomes and the decoder's prompt sources."""
    before = await _by_source(decode_url)
    async with (
        OpenAIClient(pd.entry_url, model=pd.model) as pd_client,
        OpenAIClient(ref.entry_url, model=ref.model) as ref_client,
    ):
        outcomes = [await _one(pd_client, ref_client, k, b) for k, b in demo_requests()]
    after = await _by_source(decode_url)
    sent = sum(o.prompt_tokens or 0 for o in outcomes)
    return outcomes, Handoff(sent, after[EXTERNAL] - before[EXTERNAL], after[LOCAL] - before[LOCAL])


def _table(outcomes: list[Outcome]) -> Table:
    table = Table(title="PD (local/1p1d via the proxy) vs single instance, greedy")
    for col in ("#", "kind", "prompt tokens", "PD answer (start)", "byte-identical"):
        table.add_column(col)
    for i, o in enumerate(outcomes, 1):
        same = "[green]yes[/green]" if o.equal else f"[red]no[/red] {o.error or ''}"
        table.add_row(str(i), o.kind, str(o.prompt_tokens), repr(o.pd_text[:40]), same)
    return table


def _start(specs: list[RunSpec], console: Console, ready_timeout_s: float) -> list[int]:
    daemons: list[subprocess.Popen[bytes]] = [start_detached(s, ready_timeout_s) for s in specs]
    with ProgressView(console) as view:
        states = follow(list(zip(specs, daemons, strict=True)), view.update)
    return [
        report_detached(s, d, st, console) for s, d, st in zip(specs, daemons, states, strict=True)
    ]


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end the demo like Ctrl-C, so its runs are stopped on the way out."""

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@stop_signals_interrupt()
def run_demo(
    console: Console, model_dir: Path | None = None, ready_timeout_s: float = 900.0
) -> int:
    """The whole demo; returns 0 when every PD answer equals the reference and all KV moved."""
    model = model_dir or Path(load(PD_LAYOUT).layout.model.path)
    if not (model / "config.json").is_file():
        check_out(model)
        console.print(f"building the tiny model into {model} (offline, deterministic)")
        build_tiny_model(model)
    specs = [
        prepare_run(UpOptions(name=PD_LAYOUT, free_ports=True)),
        prepare_run(UpOptions(name=REFERENCE_LAYOUT, free_ports=True)),
    ]
    pd, ref = specs
    try:
        if any(_start(specs, console, ready_timeout_s)):
            return 1
        decode_url = next(e.url for e in pd.endpoints if e.role == "decode")
        outcomes, handoff = asyncio.run(compare(pd, ref, decode_url))
        console.print(_table(outcomes))
        console.print(
            f"decoder's prompt tokens ({BY_SOURCE_SERIES[0]}): {EXTERNAL} "
            f"+{handoff.external:.0f} of {handoff.sent} sent, {LOCAL} +{handoff.local:.0f}"
        )
        ok = all(o.equal for o in outcomes) and handoff.ok
        verdict = "[green]PD == single, byte for byte[/green]" if ok else "[red]MISMATCH[/red]"
        console.print(f"{verdict}: {sum(o.equal for o in outcomes)}/{len(outcomes)} identical")
        for spec in specs:
            console.print(f"records of {spec.layout}: {spec.run_dir}")
        return 0 if ok else 1
    finally:
        for spec in specs:
            console.print(stop_run(RunDir(spec.run_dir)))
