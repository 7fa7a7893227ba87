"""``python3 -m servekit.proxy.join``: a new engine joins every proxy once it answers /health.

A stdlib HTTP server stands in for both the engine (``/health``) and the proxy
(``/admin/instances/add``), recording what the join sent; the body is the one the
proxy's admin API parses (:class:`servekit.proxy.admin.Change`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from servekit.errors import UsageError
from servekit.proxy import join, prestop
from servekit.proxy.admin import Change
from servekit.proxy.bundle import build_zipapp


class _Fake(ThreadingHTTPServer):
    healthy_after = 0
    add_status = 200
    probes = 0
    added: list[tuple[dict[str, Any], str | None]]


class _Handler(BaseHTTPRequestHandler):
    server: _Fake

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.server.probes += 1
        ok = self.path == "/health" and self.server.probes > self.server.healthy_after
        self.send_response(200 if ok else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(size))
        self.server.added.append((body, self.headers.get("Authorization")))
        status = self.server.add_status
        out = json.dumps({"error": {"message": "nope"}} if status >= 400 else {}).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture
def fake() -> Iterator[_Fake]:
    server = _Fake(("127.0.0.1", 0), _Handler)
    server.added = []
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _args(server: _Fake, *extra: str) -> list[str]:
    url = f"http://127.0.0.1:{server.server_address[1]}"
    return ["--proxies", "127.0.0.1", "--port", str(server.server_address[1]), "--role", "decode",
            "--urls", url, "--wait", "20", *extra]  # fmt: skip


def test_it_waits_for_health_then_adds_with_the_key(
    fake: _Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.healthy_after = 2
    monkeypatch.setattr(join, "POLL_S", 0.01)
    monkeypatch.setenv("K", "s3cret")
    url = f"http://127.0.0.1:{fake.server_address[1]}"
    pub = f"{url}=tcp://127.0.0.1:5557"
    assert join.main(_args(fake, "--kv-events", pub, "--key-env", "K")) == 0
    assert fake.probes == 3
    [(body, auth)] = fake.added
    assert body == {"role": "decode", "urls": [url], "kv_events": {url: "tcp://127.0.0.1:5557"}}
    assert auth == "Bearer s3cret"
    change = Change.parse(body)  # what the proxy's admin API takes
    assert change.urls == (url,) and change.publishers[0][0] == url


def test_a_bootstrap_body_is_the_admin_apis(fake: _Fake, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{fake.server_address[1]}"
    key = tmp_path / "key"
    key.write_text("filekey\nsecond line\n")
    args = _args(fake, "--bootstrap", f"{url}=7=http://127.0.0.1:8998", "--key-file", str(key))
    assert join.main(args) == 0
    [(body, auth)] = fake.added
    assert Change.parse(body).bootstraps == ((url, ("7", "http://127.0.0.1:8998")),)
    assert auth == "Bearer filekey"


def test_a_refusal_is_final_and_reported(fake: _Fake, capsys: pytest.CaptureFixture[str]) -> None:
    fake.add_status = 401
    assert join.main(_args(fake)) == 1
    assert len(fake.added) == 1  # a 4xx is not asked again
    assert "not joined (HTTP 401: nope)" in capsys.readouterr().err


def test_an_engine_that_exits_first_stops_the_wait(
    fake: _Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.healthy_after = 10**6
    monkeypatch.setattr(join, "POLL_S", 0.01)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert join.main(_args(fake, "--pids", str(gone.pid))) == join.EXITED
    assert fake.added == []


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--kv-events", "http://x:1=tcp://y:2"], "--kv-events"),  # not one of --urls
        (["--bootstrap", "nonsense"], "--bootstrap"),
        (["--pids", "12a"], "--pids"),
        (["--key-env", "A", "--key-file", "/k"], "--key-file"),
        (["--role", "proxy"], "--role"),
    ],
)
def test_bad_flags_are_refused_naming_the_flag(
    extra: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--proxies", "p", "--urls", "http://127.0.0.1:9"]
    assert join.main(base + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert named in err[-1], err


def test_the_leave_reads_a_key_file_too(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text(" k1 \n")
    assert prestop.admin_key(None, str(key)) == "k1"
    assert prestop.admin_key(None, str(tmp_path / "missing")) is None
    with pytest.raises(UsageError, match="--key-env, --key-file"):
        prestop.parse(["--proxies", "p", "--urls", "u", "--key-env", "A", "--key-file", "/k"])


def test_join_and_leave_run_from_the_zipapp_on_the_standard_library_alone(
    fake: _Fake, tmp_path: Path
) -> None:
    """A new machine has Python, not servekit nor aiohttp: ``-S`` drops site-packages."""
    pyz = build_zipapp(tmp_path / "servekit-proxy.pyz")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(pyz), "K": "k"}
    python = [sys.executable, "-S", "-m"]
    aiohttp = subprocess.run([*python[:2], "-c", "import aiohttp"], env=env,
                             capture_output=True, text=True, check=False)  # fmt: skip
    assert aiohttp.returncode != 0  # the control: nothing beyond the standard library
    done = subprocess.run([*python, "servekit.proxy.join", *_args(fake, "--key-env", "K")],
                          env=env, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert fake.added and fake.added[0][1] == "Bearer k"
    url = f"http://127.0.0.1:{fake.server_address[1]}"
    left = subprocess.run([*python, "servekit.proxy.prestop", "--proxies", "127.0.0.1", "--port",
                           str(fake.server_address[1]), "--urls", url, "--wait", "1"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert "prestop: 127.0.0.1" in left.stderr, left.stderr  # reached the proxy, stdlib only
