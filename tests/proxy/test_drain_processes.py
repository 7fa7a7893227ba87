"""A drain-cut stream carried on by a decoder process that never saw its prompt.

On the fake clusters every simulated engine is a process of its own (``servekit sim
serve``), and the simulator carries a token-id continuation on only from the prompts
it remembers (:mod:`servekit.sim.resume`). A stream a leaving decoder's drain cuts
goes to another decoder, which never answered that prompt: without the transcripts
the processes share it answered afresh, and where the cut left the client holding
tokens past the last settle point (a speculative decoder sends two tokens an event)
the proxy found the new answer's overlap different and ended the stream with
``stream_interrupted`` ("the new decoder's token ids differ from what the client
has"): the divergence seen once in four runs of the elastic ramp with
``k8s.drain_grace=2`` (docs/elastic.md). One process stands in for two here: what it
remembers is dropped once the first legs are admitted, as the other decoder's
process never had it; the shared folder is what remains.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from servekit.sim.resume import TRANSCRIPTS

from .harness import run, wait_until
from .test_drain import SLOW, Deployment, deployment, done_cleanly

# two tokens a decode step, so a cut leaves the client tokens past its last settle point
MTP = {**SLOW, "name": "slow-mtp", "num_speculative_tokens": 1, "acceptance_length": 2.0}
DIVERGED = b"the new decoder's token ids differ from what the client has"


def answer(raw: bytes) -> tuple[str, list[str | None]]:
    """A streamed completion's text and finish reasons (a migrated stream's events are
    split where the new leg's overlap ended, so its bytes differ from an unbroken one's)."""
    text, finishes = "", []
    for line in raw.split(b"\n\n"):
        if line.startswith(b"data: {"):
            choice = json.loads(line[6:])["choices"][0]
            text += choice["text"]
            finishes.append(choice["finish_reason"])
    return text, [f for f in finishes if f is not None]


async def _drain_cut_on_a_fresh_process(d: Deployment) -> tuple[list[bytes], list[bytes]]:
    """Four streams, two on d0; d0 leaves (grace 0.2 s) once each has several events out,
    after this process forgot the prompts; the baseline answers and the streamed ones."""
    baseline = await asyncio.gather(*(d.ask(i, f"r{i}", max_tokens=32) for i in range(4)))
    running = [asyncio.ensure_future(d.ask(i, f"r{i}", max_tokens=32)) for i in range(4)]
    d0 = d.sim.endpoints["d0"]
    await wait_until(lambda: len(d0.engine.running) == 2, "two streams on d0")
    TRANSCRIPTS.forget()  # the decoder they migrate to is another process
    await wait_until(lambda: all(s.emitted >= 5 for s in d0.engine.running), "events out")
    out = await d.admin("leave", {"urls": [d.url("d0")], "wait_s": 10})
    assert out["drained"] is True and out["drains"][0]["migrated"] == 2
    return baseline, list(await asyncio.gather(*running))


@pytest.mark.slow
def test_a_drain_cut_stream_goes_on_unchanged_on_a_decoder_that_never_saw_its_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TRANSCRIPTS, "shared", None)
    TRANSCRIPTS.share(tmp_path / "transcripts")  # as the fake clusters' engines are started

    async def scenario() -> None:
        async with deployment(1, 2, MTP, decode_policy="round-robin", drain_grace_s=0.2) as d:
            baseline, answers = await _drain_cut_on_a_fresh_process(d)
            assert all(done_cleanly(a) for a in answers), answers
            assert [answer(a) for a in answers] == [answer(b) for b in baseline]
            migrated = await d.metric('servekit_proxy_migrations_total{outcome="ok"}')
            assert migrated == 2

    run(scenario())


@pytest.mark.slow
def test_without_the_shared_transcripts_the_cut_stream_diverges(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The positive control: the defect as it was (each process its own transcripts)."""
    monkeypatch.setattr(TRANSCRIPTS, "shared", None)

    async def scenario() -> None:
        async with deployment(1, 2, MTP, decode_policy="round-robin", drain_grace_s=0.2) as d:
            baseline, answers = await _drain_cut_on_a_fresh_process(d)
            diverged = [a for a in answers if DIVERGED in a]
            assert len(diverged) == 2, answers
            assert all(b"stream_interrupted" in a and b"[DONE]" in a for a in diverged)
            kept = [a for a, b in zip(answers, baseline, strict=True) if a == b]
            assert len(kept) == 2  # the two streams on d1 were never cut

    run(scenario())
