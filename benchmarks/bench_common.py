"""Helpers shared by the benchmark scripts: a simulator in its own process.

The harness and the simulator must not share a process (they would share the
GIL and one event loop's latency), so benchmarks start ``servekit sim`` as a
subprocess, optionally pinned to given CPU cores, and read its URL from the
ready file.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def sim_process(spec: dict[str, Any], cpus: set[int] | None = None) -> Iterator[str]:
    """Run ``servekit sim --spec`` in a subprocess; yield its first endpoint's URL."""
    with sim_process_pid(spec, cpus) as (url, _pid):
        yield url


def cpu_seconds_of(pid: int) -> float:
    """User + system CPU seconds a process has used so far (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def sim_process_pid(
    spec: dict[str, Any], cpus: set[int] | None = None
) -> Iterator[tuple[str, int]]:
    """As :func:`sim_process`, yielding (URL, pid) so a caller can read its CPU use."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "spec.json"
        ready = Path(tmp) / "ready.json"
        spec_path.write_text(json.dumps(spec))
        argv = [sys.executable, "-m", "servekit", "sim", "--spec", str(spec_path)]
        argv += ["--ready-file", str(ready)]

        def pin() -> None:
            if cpus:
                os.sched_setaffinity(0, cpus)

        proc = subprocess.Popen(argv, preexec_fn=pin, stdout=subprocess.DEVNULL)  # noqa: PLW1509
        try:
            deadline = time.monotonic() + 60
            while not ready.is_file():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("servekit sim did not start")
                time.sleep(0.05)
            time.sleep(0.05)
            urls = json.loads(ready.read_text())
            yield _first_url(urls), proc.pid
        finally:
            proc.terminate()
            proc.wait(10)


def _first_url(urls: Any) -> str:
    if isinstance(urls, dict):
        value = urls.get("endpoints", urls)
        if isinstance(value, dict):
            return str(next(iter(value.values())))
        if isinstance(value, list):
            return str(value[0] if isinstance(value[0], str) else value[0]["url"])
    if isinstance(urls, list):
        return str(urls[0])
    raise RuntimeError(f"unexpected ready file: {urls!r}")


def pin_self(cpus: set[int]) -> None:
    """Pin this process (the harness) to ``cpus``."""
    os.sched_setaffinity(0, cpus)
