"""How long migration's reading of one big SSE event holds the event loop, before and after.

    .venv/bin/python benchmarks/migration_events.py [--mb 8] [--repeat 3]

Issue 45: "one 8 MB event took about 2 s in Tape.feed". Side by side, in one run:

- *before*: the Tape of commit 77bee6b (loaded from git as it was), fed the event
  whole and in 64 KiB chunks (as aiohttp hands a stream over);
- *after, inline*: the splitter and the event read on the loop (``--parse-workers 0``,
  or an event under ``--parse-inline-bytes``);
- *after, worker*: what the loop does when a parse worker reads the event (the
  splitter only; the read runs in the worker: its wall time is printed beside).

Two events of about ``--mb`` MB: a completion's text (one huge delta) and a first
event whose ``prompt_token_ids`` hold a long prompt's ids. Figures are the best of
``--repeat`` runs, on a busy shared host: read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from servekit.proxy.parsepool import Workers  # noqa: E402
from servekit.proxy.sse import Splitter, read_event  # noqa: E402
from servekit.proxy.tape import Tape  # noqa: E402

BEFORE = "77bee6b"  # the last commit with the regex-reading Tape
CHUNK = 64 << 10


def old_tape_module() -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{BEFORE}:src/servekit/proxy/migration.py"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout  # fmt: skip
    path = Path(tempfile.mkdtemp()) / "old_migration.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("old_migration", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_migration"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def events(mb: int) -> dict[str, bytes]:
    size = mb << 20
    head = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m"}
    text = ("the engine serves tokens " * (size // 25 + 1))[:size]
    ids = list(range(1000, 1000 + size // 8))
    with_ids = {"index": 0, "text": " a", "token_ids": [7], "prompt_token_ids": ids}
    made = {
        "text": {**head, "choices": [{"index": 0, "text": text, "token_ids": [7]}]},
        "prompt ids": {**head, "choices": [with_ids]},
    }
    return {k: b"data: " + json.dumps(v, separators=(",", ":")).encode() + b"\n\n"
            for k, v in made.items()}  # fmt: skip


def chunks(event: bytes, whole: bool) -> list[bytes]:
    return [event] if whole else [event[i : i + CHUNK] for i in range(0, len(event), CHUNK)]


def best(repeat: int, run: Callable[[], float]) -> float:
    return min(run() for _ in range(repeat))


def before(module: ModuleType, event: bytes, whole: bool) -> float:
    tape = module.Tape("/v1/completions", {})
    started = time.perf_counter()
    for chunk in chunks(event, whole):
        tape.feed(chunk)
    return time.perf_counter() - started


def after_inline(event: bytes, whole: bool) -> float:
    tape = Tape("/v1/completions", {}, max_event_bytes=1 << 30)
    started = time.perf_counter()
    for chunk in chunks(event, whole):
        tape.feed(chunk)
    return time.perf_counter() - started


def after_worker(workers: Workers, event: bytes, whole: bool) -> tuple[float, float]:
    """The loop's share (splitting) and the worker's wall time for the read."""

    async def go() -> tuple[float, float]:
        splitter = Splitter()
        loop_s = 0.0
        found: list[bytes] = []
        for chunk in chunks(event, whole):
            t = time.perf_counter()
            found += splitter.feed(chunk)
            loop_s += time.perf_counter() - t
        t = time.perf_counter()
        got: Any = await workers.call(read_event, found[0], True)
        assert got.kind == "data"
        return loop_s, time.perf_counter() - t

    return asyncio.run(go())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    module = old_tape_module()
    workers = Workers(1, 1 << 20)
    asyncio.run(workers.call(read_event, b"data: [DONE]\n\n"))  # started before timing
    try:
        for name, event in events(args.mb).items():
            for whole in (True, False):
                how = "one chunk" if whole else "64 KiB chunks"
                old = best(args.repeat, lambda e=event, w=whole: before(module, e, w))
                new = best(args.repeat, lambda e=event, w=whole: after_inline(e, w))
                runs = [after_worker(workers, event, whole) for _ in range(args.repeat)]
                split, read = min(r[0] for r in runs), min(r[1] for r in runs)
                print(
                    f"{len(event) / 2**20:.1f} MB event ({name}), {how}: loop held before "
                    f"{old:.3f} s; after, read on the loop {new:.3f} s ({old / new:.0f}x less), "
                    f"read in a worker {split:.4f} s ({old / split:.0f}x less; the worker's "
                    f"read {read:.3f} s)",
                    flush=True,
                )
    finally:
        asyncio.run(workers.close())
    return 0


if __name__ == "__main__":
    sys.exit(main())
