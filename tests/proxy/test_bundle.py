"""The rendered artefacts run where only aiohttp is installed (issue 12, item 4).

A plain virtual environment (``venv --without-pip``) gets copies of aiohttp's
installed distributions and their dependencies, nothing else: servekit and
pydantic are not importable there. In it, the proxy zipapp serves a PD request
in front of simulator endpoints (run from servekit's own environment), and the
guard file, copied as ``servekit_decode_guard.py`` on PYTHONPATH, applies the rule.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import venv
import zipfile
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import servekit
from servekit.guard import RENDERED_MODULE, middleware_target, source_bytes
from servekit.proxy.bundle import build_zipapp

from .test_config import free_port


def needed(dist: str, seen: set[str]) -> set[str]:
    """``dist`` and everything it requires here (extras and other Pythons left out)."""
    name = metadata.distribution(dist).metadata["Name"]
    if name.lower() in seen:
        return seen
    seen.add(name.lower())
    for raw in metadata.requires(name) or ():
        req = Requirement(raw)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            needed(req.name, seen)
    return seen


def copy_distribution(dist: str, site: Path) -> None:
    for f in metadata.distribution(dist).files or ():
        src = Path(str(f.locate()))
        if src.is_file() and "__pycache__" not in f.parts:
            dest = site / f
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)


@pytest.fixture(scope="module")
def plain_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with aiohttp and its dependencies only."""
    root = tmp_path_factory.mktemp("plain") / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    python = root / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            text=True,
        ).strip()
    )
    for dist in sorted(needed("aiohttp", set())):
        copy_distribution(dist, site)
    return python


def run_in(python: Path, code: str, **kw: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(kw.pop("env", {}))  # type: ignore[arg-type]
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env,
                          timeout=120, check=False, **kw)  # type: ignore[call-overload]  # fmt: skip


def test_the_plain_environment_has_aiohttp_and_not_servekit(plain_python: Path) -> None:
    out = run_in(plain_python, "import aiohttp; print(aiohttp.__version__)")
    assert out.returncode == 0, out.stderr
    for module in ("servekit", "pydantic", "prometheus_client", "fastapi"):
        missing = run_in(plain_python, f"import {module}")
        assert missing.returncode != 0 and "ModuleNotFoundError" in missing.stderr, module


def test_the_zipapp_is_deterministic_and_holds_what_the_proxy_needs(tmp_path: Path) -> None:
    a = build_zipapp(tmp_path / "a" / "proxy.pyz")
    b = build_zipapp(tmp_path / "b" / "proxy.pyz")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes().startswith(b"#!/usr/bin/env python3\n") and os.access(a, os.X_OK)
    names = zipfile.ZipFile(a).namelist()
    assert names == sorted(names) and "__main__.py" in names
    assert {"servekit/guard.py", "servekit/errors.py", "servekit/proxy/server.py",
            "prometheus_client/exposition.py", "prometheus_client/LICENSE"} <= set(names)  # fmt: skip
    assert zipfile.ZipFile(a).read("servekit/guard.py") == source_bytes()


def _runtime_imports(source: str) -> set[str]:
    """servekit modules a file imports at run time (``if TYPE_CHECKING:`` blocks skipped)."""
    found: set[str] = set()
    todo: list[ast.AST] = [ast.parse(source)]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        todo.extend(ast.iter_child_nodes(node))
    return {m for m in found if m.startswith("servekit.")}


def test_the_zipapp_bundles_every_servekit_module_the_proxy_imports(tmp_path: Path) -> None:
    """Issue 25: the proxy imports shared words from the vocabulary, and carries them."""
    names = set(zipfile.ZipFile(build_zipapp(tmp_path / "proxy.pyz")).namelist())
    root = Path(servekit.__file__).parent
    todo = [n for n in names if n.startswith("servekit/")]
    while todo:
        for module in _runtime_imports(
            zipfile.Path(tmp_path / "proxy.pyz", todo.pop()).read_text()
        ):
            parts = module.split(".")[1:]
            for depth in range(1, len(parts) + 1):
                rel = "/".join(parts[:depth])
                files = [f for f in (f"{rel}.py", f"{rel}/__init__.py") if (root / f).is_file()]
                for f in files:
                    assert f"servekit/{f}" in names, f"{module}: servekit/{f} is not bundled"
    assert "servekit/vocabulary/urls.py" in names
    assert not any(n.startswith("servekit/vocabulary/model") for n in names)  # pydantic's


@pytest.fixture
def sim_pd(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A prefill and a guarded decode endpoint, from servekit's own environment."""
    ports = {"p0": free_port(), "d0": free_port()}
    spec = {"endpoints": [
        {"name": "p0", "role": "prefill", "port": ports["p0"]},
        {"name": "d0", "role": "decode", "port": ports["d0"], "guard": True},
    ]}  # fmt: skip
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    ready = tmp_path / "ready.json"
    argv = [sys.executable, "-m", "servekit.sim", "--spec", str(tmp_path / "spec.json"),
            "--ready-file", str(ready)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(ready.exists, "simulator ready")
        yield {n: f"http://127.0.0.1:{p}" for n, p in ports.items()}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def wait_for(cond: Callable[[], bool], what: str, bound_s: float = 60.0) -> None:
    deadline = time.monotonic() + bound_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)


def http(url: str, body: dict[str, object] | None = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def spawned_by(pid: int) -> list[bytes]:
    """The command lines of ``pid``'s child processes."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append((stat.parent / "cmdline").read_bytes())
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return out


@pytest.mark.slow
def test_the_zipapp_proxy_serves_pd_from_a_plain_environment(
    plain_python: Path, sim_pd: dict[str, str], tmp_path: Path
) -> None:
    pyz = build_zipapp(tmp_path / "servekit-proxy.pyz")
    port = free_port()
    argv = [str(plain_python), str(pyz), "--prefill", sim_pd["p0"], "--decode", sim_pd["d0"],
            "--port", str(port), "--log-level", "warning", "--parse-inline-bytes", "2000"]  # fmt: skip
    log = tmp_path / "proxy.log"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: http(url + "/health")[0] == 200 or proc.poll() is not None, "proxy up")
        assert proc.poll() is None, log.read_text()
        body = {"model": "sim-model", "prompt": "hello from a plain venv", "max_tokens": 5,
                "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
        status, out = http(url + "/v1/completions", body)
        assert status == 200 and out.endswith(b"data: [DONE]\n\n"), out
        assert not spawned_by(proc.pid)  # small bodies are parsed on the loop
        chat = {"model": "sim-model", "max_tokens": 3, "user": "u" * 3000,
                "messages": [{"role": "user", "content": f"part {i}"} for i in range(900)]}  # fmt: skip
        status, out = http(url + "/v1/chat/completions", chat)  # parsed in a worker process
        assert status == 200 and json.loads(out)["usage"]["completion_tokens"] == 3, out
        assert any(b"spawn_main" in cmd for cmd in spawned_by(proc.pid))
        status, raw = http(url + "/metrics/engines")
        assert status == 200
        hits = [line for line in raw.decode().splitlines()
                if line.startswith("vllm:external_prefix_cache_hits_total")
                and 'engine_role="decode"' in line]  # fmt: skip
        assert hits and float(hits[0].rsplit(" ", 1)[1]) > 0  # decode pulled prefilled KV
        status, raw = http(sim_pd["d0"] + "/v1/completions", body)
        assert status == 400  # straight to decode: the guard refuses
        status, raw = http(url + "/metrics")
        assert b'servekit_proxy_requests_total{route="/v1/completions",status="200"} 1.0' in raw
        bad = subprocess.run([str(plain_python), str(pyz), "--prefill", "x"], env=env,
                             capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert (
            bad.returncode == 2
            and bad.stderr.startswith("error: ")
            and "Traceback" not in bad.stderr
        )
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0, log.read_text()


GUARD_HARNESS = """
import asyncio, json, sys
import {module} as guard
from {module} import DecodeGuardMiddleware
assert "servekit" not in sys.modules

async def app(scope, receive, send):
    if scope["type"] == "http":
        while (await receive()).get("more_body"):
            pass
        body = b"" if scope["path"] == "/health" else b"generated"
        await send({{"type": "http.response.start", "status": 200, "headers": []}})
        await send({{"type": "http.response.body", "body": body}})

async def call(mw, method, path, body):
    sent, queue = [], [{{"type": "http.request", "body": body}}]
    async def receive():
        return queue.pop(0)
    async def send(m):
        sent.append(m)
    await mw({{"type": "http", "method": method, "path": path, "headers": []}}, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]), sent[0]["headers"]

routed = {{"do_remote_prefill": True, "remote_block_ids": [[1, 2]], "remote_engine_id": "p",
          "remote_request_id": "r", "remote_host": "10.0.0.1", "remote_port": 5600}}
mw = DecodeGuardMiddleware(app)
out = {{}}
for name, method, path, doc in [
    ("incident", "POST", "/v1/completions", {{"prompt": "hi", "max_tokens": 128}}),
    ("not_remote", "POST", "/v1/completions", {{"prompt": "hi", "kv_transfer_params": {{"do_remote_prefill": False}}}}),
    ("routed", "POST", "/v1/chat/completions", {{"messages": [], "kv_transfer_params": routed}}),
    ("marker", "POST", "/v1/completions", {{"prompt": "hi", "kv_transfer_params": {{"servekit_prompt_keyed": True}}}}),
    ("tokenize", "POST", "/tokenize", {{"prompt": "hi"}}),
    ("health", "GET", "/health", None),
]:
    raw = b"" if doc is None else json.dumps(doc).encode()
    status, body, headers = asyncio.run(call(mw, method, path, raw))
    out[name] = [status, body.decode(), dict((k.decode(), v.decode()) for k, v in headers)]
print(json.dumps(out))
"""


def test_the_guard_file_applies_the_rule_from_a_plain_environment(
    plain_python: Path, tmp_path: Path
) -> None:
    (tmp_path / f"{RENDERED_MODULE}.py").write_bytes(source_bytes())
    code = GUARD_HARNESS.format(module=RENDERED_MODULE)
    out = run_in(plain_python, code, env={"PYTHONPATH": str(tmp_path)}, cwd="/")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    # no SERVEKIT_DECODE_GUARD: strict, so a client's prompt-keyed marker is refused too
    for refused in ("incident", "not_remote", "marker"):
        status, body, _ = got[refused]
        assert (
            status == 400
            and json.loads(body)["error"]["code"] == "decode_role_requires_kv_transfer_params"
        )
    for passed in ("routed", "tokenize"):
        assert got[passed][:2] == [200, "generated"], passed
    status, body, headers = got["health"]
    assert status == 200 and headers["x-servekit-decode-guard"] == "strict"
    assert json.loads(body)["decode_guard"]["routes_from"] == "path rule"
    assert middleware_target() == f"{RENDERED_MODULE}.DecodeGuardMiddleware"


def test_the_zipapp_refuses_the_kv_events_policy_in_one_line(
    plain_python: Path, tmp_path: Path
) -> None:
    """Issue 33: kv-events needs pyzmq and msgspec, which a plain environment lacks."""
    pyz = build_zipapp(tmp_path / "servekit-proxy.pyz")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    argv = [str(plain_python), str(pyz), "--prefill", "http://127.0.0.1:9", "--decode",
            "http://127.0.0.1:9", "--prefill-policy", "kv-events"]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "kv-events needs zmq and msgspec" in out.stderr
