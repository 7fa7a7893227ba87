"""A continuation answered by another ``servekit sim serve`` process (one engine a pod).

The simulator carries a token-id continuation on from the prompts it remembers
(:mod:`servekit.sim.resume`); an engine process that never saw the prompt answers
afresh, so a stream migrated to it changes (the divergence the elastic ramp met with
``k8s.drain_grace=2``). Processes given one ``SERVEKIT_SIM_TRANSCRIPTS`` folder, as
the fake platforms start them, share what they answered.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from servekit.sim.openai import parse_generation
from servekit.sim.resume import SHARED_ENV, Transcripts

from .test_vllm_serve import free_port, procs, start, wait_healthy  # noqa: F401
from .webclient import post


def _engine(
    started: list[subprocess.Popen[str]],
    shared: Path | None,
) -> str:
    port = free_port()
    env = {"SERVEKIT_SIM_PROFILE": "zero"}
    if shared is not None:
        env[SHARED_ENV] = str(shared)
    servekit = str(Path(sys.executable).with_name("servekit"))
    start(
        started,
        [servekit, "sim", "serve", "sim-model", "--port", str(port)],
        os.environ["PATH"],
        **env,
    )
    return f"http://127.0.0.1:{port}"


def _complete(url: str, prompt: object, max_tokens: int) -> dict[str, object]:
    status, doc = post(f"{url}/v1/completions", {
        "model": "sim-model", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
        "ignore_eos": True, "return_token_ids": True,
    })  # fmt: skip
    assert status == 200, doc
    choice = doc["choices"][0]
    return {
        "text": choice["text"],
        "ids": choice["token_ids"],
        "prompt": choice["prompt_token_ids"],
    }


@pytest.mark.slow
def test_an_engine_process_carries_on_the_answer_another_began(
    tmp_path: Path,
    procs: list[subprocess.Popen[str]],  # noqa: F811
) -> None:
    shared = tmp_path / "transcripts"
    first, sharing, alone = _engine(procs, shared), _engine(procs, shared), _engine(procs, None)
    for url, proc in zip((first, sharing, alone), procs, strict=True):
        wait_healthy(url, proc)
    whole = _complete(first, "request 7: tell me about drains and migrations", 24)
    prompt, ids = whole["prompt"], whole["ids"]
    assert isinstance(prompt, list) and isinstance(ids, list) and len(ids) == 24
    rest = _complete(sharing, prompt + ids[:9], 15)
    assert rest["ids"] == ids[9:]
    # the positive control: a process sharing nothing answers the continuation afresh
    assert _complete(alone, prompt + ids[:9], 15)["ids"] != ids[9:]


def test_transcripts_shared_through_a_folder_are_found_by_a_fresh_one(tmp_path: Path) -> None:
    one, other = Transcripts(), Transcripts()
    one.share(tmp_path)
    other.share(tmp_path)
    for text in ("short one", "a longer prompt " * 8):
        req = parse_generation("completion", {"prompt": text, "max_tokens": 8})
        one.record(req, hash(tuple(req.prompt_ids)))
        cont = parse_generation("completion", {"prompt": [*req.prompt_ids, 5, 6], "max_tokens": 4})
        found = other.origin(cont)
        assert found is not None and found[0].prompt_text == text and found[2] == [5, 6]
        assert Transcripts().origin(cont) is None  # nothing shared: nothing found


def test_a_process_shares_no_more_than_its_budget(tmp_path: Path) -> None:
    """Past its budget a process writes nothing more to the shared folder: the prompts
    before are found by another process, the one after is not (answered afresh)."""
    one = Transcripts(shared=tmp_path, budget=1)  # the first write passes the budget
    other = Transcripts(shared=tmp_path)
    found = []
    for text in ("first prompt", "second prompt"):
        req = parse_generation("completion", {"prompt": text, "max_tokens": 8})
        one.record(req, hash(tuple(req.prompt_ids)))
        cont = parse_generation("completion", {"prompt": [*req.prompt_ids, 5], "max_tokens": 4})
        found.append(other.origin(cont) is not None)
    assert found == [True, False]
    assert len(list(tmp_path.rglob("*.json"))) == 1
    assert one.shared_bytes == (next(tmp_path.rglob("*.json"))).stat().st_size


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=300))
def test_a_damaged_shared_transcript_is_not_used(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        one = Transcripts(shared=root)
        req = parse_generation("completion", {"prompt": "damaged files", "max_tokens": 8})
        one.record(req, hash(tuple(req.prompt_ids)))
        for path in root.rglob("*.json"):
            path.write_bytes(data)
        cont = parse_generation("completion", {"prompt": [*req.prompt_ids, 5], "max_tokens": 4})
        found = Transcripts(shared=root).origin(cont)
        assert found is None or found[0].prompt_text == "damaged files"
