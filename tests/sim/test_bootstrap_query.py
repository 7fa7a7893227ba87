"""Bootstrap mode across processes: the prefill's bootstrap server and the decoder's query.

Two simulators (two registries: what two ``sim serve`` processes are) stand for a
prefill and a decoder of vLLM's MooncakeConnector. The decoder trusts nothing it is
told of another process but what the prefill's bootstrap server answers: an engine id
the server does not name fails the request, as vLLM 0.32's connector fails the load
("remote engine_id ... not found from bootstrap server ...", ``kv_load_failure_policy``
"fail"). Answers of a hostile server are bounded and never crash the decoder.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from servekit.local.ports import free_ports
from servekit.proxy.payloads import bootstrap_decode_params
from servekit.sim.pd import KvRegistry
from servekit.sim.protocols.bootstrap import QUERY_BYTES, _learn
from servekit.sim.testing import RunningSim, running_sim

from .webclient import get, post

PROMPT = "The bootstrap server names its engine. " * 8


def _endpoint(name: str, role: str, engine: str, kv_port: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "port": 0, "role": role, "engine_id": engine, "kv_port": kv_port,
            "kv_mode": "bootstrap", "kv_connector": "MooncakeConnector", "kv_peers": "any",
            **extra}  # fmt: skip


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[RunningSim, RunningSim, int, Path]]:
    kv_port, decode_kv = free_ports(2)
    log = tmp_path / "d0.log"
    prefill = {"endpoints": [_endpoint("p0", "prefill", "7", kv_port)]}
    decode = {"endpoints": [_endpoint("d0", "decode", "9", decode_kv, log=str(log))]}
    with running_sim(prefill) as p, running_sim(decode) as d:
        yield p, d, kv_port, log


def _decode(d: RunningSim, engine: str, addr: str) -> tuple[int, Any]:
    body = {"prompt": PROMPT, "max_tokens": 4, "temperature": 0,
            "kv_transfer_params": bootstrap_decode_params("t-1", engine, addr)}  # fmt: skip
    return post(d.urls["d0"] + "/v1/completions", body)


def test_a_decoder_takes_only_an_engine_id_the_bootstrap_server_names(
    pair: tuple[RunningSim, RunningSim, int, Path],
) -> None:
    _, d, kv_port, log = pair
    server = f"http://127.0.0.1:{kv_port}"
    status, body = get(server + "/query")
    assert status == 200
    answer = json.loads(body)
    assert answer == {"0": {"engine_id": "7", "worker_addr": {"0": {"0": f"127.0.0.1:{kv_port}"}}}}
    assert _decode(d, "7", server)[0] == 200
    assert d.call(lambda ep: ep.state()["remote_engines"]) == ["7"]
    status, doc = _decode(d, "8", server)  # an id no engine there serves
    assert status == 500 and "KV load failed" in json.dumps(doc)
    text = log.read_text()
    assert f"remote engine_id 8 not found from bootstrap server {server}" in text
    dead = f"http://127.0.0.1:{free_ports(1)[0]}"  # no server there: the load fails too
    assert _decode(d, "5", dead)[0] == 500
    assert _decode(d, "7", server)[0] == 200  # still served: nothing else changed
    assert d.call(lambda ep: ep.state()["remote_engines"]) == ["7"]


class _Hostile(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(
    "body",
    [
        json.dumps({"0": {"engine_id": "8", "pad": "x" * QUERY_BYTES}}).encode(),  # too large
        b"[" * 60_000,  # deep nesting
        b"not json",
        json.dumps(["8"]).encode(),
    ],
)
def test_a_hostile_bootstrap_server_fails_the_load_and_nothing_else(
    pair: tuple[RunningSim, RunningSim, int, Path], body: bytes
) -> None:
    _, d, _, _ = pair
    handler = type("H", (_Hostile,), {"body": body})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        status, _ = _decode(d, "8", f"http://127.0.0.1:{httpd.server_address[1]}")
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert status == 500
    assert d.call(lambda ep: ep.state()["remote_engines"]) == []
    assert d.call(lambda ep: ep.health_status()) == 200


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids,
                                                              max_size=4),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(JSONISH)
def test_any_query_answer_is_learned_from_or_refused(doc: Any) -> None:
    reg = KvRegistry()
    try:
        _learn(reg, doc)
    except ValueError:
        assert not isinstance(doc, dict)
    assert all(isinstance(e, str) for e in reg.remote_engines)
