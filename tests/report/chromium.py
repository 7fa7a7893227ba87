"""Driving Debian's headless Chromium: --dump-dom, --screenshot and the DevTools protocol.

Every run gets a fresh profile folder and the flags that keep Chromium off the
network (no background networking, component updates, sync or QUIC).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
TIMEOUT_S = 120


def binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextlib.contextmanager
def _profile() -> Iterator[str]:
    """A fresh profile folder, removed even if a Chromium helper still writes into it."""
    folder = tempfile.mkdtemp(prefix="chromium-")
    try:
        yield folder
    finally:
        for _ in range(20):
            shutil.rmtree(folder, ignore_errors=True)
            if not Path(folder).exists():
                break
            time.sleep(0.1)


def _stop_group(proc: subprocess.Popen[Any]) -> None:
    """Stop Chromium and every helper process it forked (its own session)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=20)
            break
        except subprocess.TimeoutExpired:
            continue


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    exe = binary()
    assert exe is not None, "chromium is not installed (scripts/bootstrap.sh tools)"
    with _profile() as profile:
        argv = [exe, *FLAGS, f"--user-data-dir={profile}", *args]
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            out, err = proc.communicate(timeout=TIMEOUT_S)
        finally:
            _stop_group(proc)
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def dump_dom(url: str) -> str:
    """The DOM after the page's scripts ran."""
    done = _run(["--virtual-time-budget=2000", "--dump-dom", url])
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def screenshot(url: str, out: Path, size: str = "1280,1400") -> Path:
    done = _run([f"--window-size={size}", f"--screenshot={out}", url])
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@contextlib.contextmanager
def devtools(url: str) -> Iterator[str]:
    """Start Chromium on ``url`` with a DevTools port; yield the page's websocket URL."""
    exe = binary()
    assert exe is not None
    with _profile() as profile:
        proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            port = _wait_port(Path(profile) / "DevToolsActivePort", proc)
            yield asyncio.run(_page_ws(port))
        finally:
            _stop_group(proc)


def _wait_port(path: Path, proc: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text().strip():
            return int(path.read_text().splitlines()[0])
        assert proc.poll() is None, "chromium exited before opening its DevTools port"
        time.sleep(0.1)
    raise AssertionError("chromium never wrote DevToolsActivePort")


async def _page_ws(port: int) -> str:
    async with aiohttp.ClientSession() as session:
        for _ in range(100):
            async with session.get(f"http://127.0.0.1:{port}/json/list") as resp:
                pages = [t for t in await resp.json() if t.get("type") == "page"]
            if pages:
                return str(pages[0]["webSocketDebuggerUrl"])
            await asyncio.sleep(0.1)
    raise AssertionError("no page target in chromium")


async def _evaluate(ws_url: str, expressions: list[str]) -> list[Any]:
    results: list[Any] = []
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url) as ws:
        for i, expr in enumerate(expressions, start=1):
            params = {"expression": expr, "returnByValue": True, "awaitPromise": True}
            await ws.send_str(json.dumps({"id": i, "method": "Runtime.evaluate", "params": params}))
            while True:
                msg = json.loads((await ws.receive()).data)
                if msg.get("id") == i:
                    break
            assert "exceptionDetails" not in msg["result"], msg
            results.append(msg["result"]["result"].get("value"))
    return results


def evaluate(ws_url: str, *expressions: str) -> list[Any]:
    """Evaluate JavaScript expressions in order in the page; their JSON values."""
    return asyncio.run(_evaluate(ws_url, list(expressions)))
