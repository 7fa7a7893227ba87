"""Bootstrap mode across processes: the prefill's bootstrap server and the decoder's query.

Simulators in their own registries (what ``sim serve`` processes are) stand for
prefills and decoders of vLLM's MooncakeConnector. The decoder trusts nothing it is
told of another process but what the prefill's bootstrap server answers: an engine id
the server does not name fails the request, as vLLM 0.32's connector fails the load
("remote engine_id ... not found from bootstrap server ...", ``kv_load_failure_policy``
"fail"). A DP rank's id is ``<id>_dp<rank>`` (vLLM's engine core), so the plain id of a
DP prefill fails there too. The decoder keeps the worker address each id was given and
pulls from it: a prefill replaced under an id a decoder met fails its pulls, one given a
new id serves. Answers of a hostile server are bounded and never crash the decoder.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from servekit.errors import UsageError
from servekit.local.ports import free_ports
from servekit.proxy.payloads import bootstrap_decode_params, bootstrap_prefill_params
from servekit.sim.pd import KvRegistry
from servekit.sim.protocols.bootstrap import (
    PULL_BYTES,
    PULL_PATH,
    QUERY_BYTES,
    _learn,
    serves_bootstrap,
)
from servekit.sim.testing import RunningSim, running_sim
from servekit.sim.vllmargs import parse_launch
from servekit.sim.vllmserve import build_spec

from .webclient import get, post, request

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


def _prefill(p: RunningSim, name: str = "p0") -> str:
    """A prefill holding its KV under a fresh transfer id (as the proxy sends it); the id."""
    tid = uuid.uuid4().hex
    body = {"prompt": PROMPT, "max_tokens": 1, "temperature": 0,
            "kv_transfer_params": bootstrap_prefill_params(tid)}  # fmt: skip
    status, doc = post(p.urls[name] + "/v1/completions", body)
    assert status == 200, doc
    return tid


def _decode(d: RunningSim, engine: str, addr: str, tid: str = "t-1") -> tuple[int, Any]:
    body = {"prompt": PROMPT, "max_tokens": 4, "temperature": 0,
            "kv_transfer_params": bootstrap_decode_params(tid, engine, addr)}  # fmt: skip
    return post(d.urls["d0"] + "/v1/completions", body)


def _worker(server: str) -> str:
    """The worker address a bootstrap server names (its one entry, TP rank 0)."""
    status, body = get(server + "/query")
    assert status == 200
    return str(next(iter(json.loads(body).values()))["worker_addr"]["0"]["0"])


def test_a_decoder_takes_only_an_engine_id_the_bootstrap_server_names(
    pair: tuple[RunningSim, RunningSim, int, Path],
) -> None:
    p, d, kv_port, log = pair
    server = f"http://127.0.0.1:{kv_port}"
    status, body = get(server + "/query")
    assert status == 200
    answer = json.loads(body)
    worker = answer["0"]["worker_addr"]["0"]["0"]
    assert answer == {"0": {"engine_id": "7", "worker_addr": {"0": {"0": worker}}}}
    assert worker.startswith("tcp://127.0.0.1:") and worker != f"tcp://127.0.0.1:{kv_port}"
    assert _decode(d, "7", server, _prefill(p))[0] == 200
    assert d.call(lambda ep: ep.state()["remote_engines"]) == ["7"]
    status, doc = _decode(d, "8", server, _prefill(p))  # an id no engine there serves
    assert status == 500 and "KV load failed" in json.dumps(doc)
    text = log.read_text()
    assert f"remote engine_id 8 not found from bootstrap server {server}" in text
    dead = f"http://127.0.0.1:{free_ports(1)[0]}"  # no server there: the load fails too
    assert _decode(d, "5", dead, _prefill(p))[0] == 500
    assert _decode(d, "7", server, _prefill(p))[0] == 200  # still served: nothing else changed
    assert d.call(lambda ep: ep.state()["remote_engines"]) == ["7"]


def test_a_dp_prefill_rank_is_named_with_vllms_suffix(tmp_path: Path) -> None:
    """Two external-DP ranks of engine 7 (each its own API and bootstrap server, as vLLM
    runs ``--data-parallel-rank``): each answers ``7_dp<rank>``; a decoder told that
    id is served, told the plain ``7`` (the control) it fails the load."""
    base, decode_kv = free_ports(2)
    log = tmp_path / "d0.log"
    ranks = [_endpoint(f"p{r}", "prefill", "7", base, dp_rank=r, dp_size=2,
                       bootstrap_port=free_ports(1)[0]) for r in range(2)]  # fmt: skip
    decode = {"endpoints": [_endpoint("d0", "decode", "9", decode_kv, log=str(log))]}
    with running_sim({"endpoints": ranks}) as p, running_sim(decode) as d:
        for rank, ep in enumerate(ranks):
            server = f"http://127.0.0.1:{ep['bootstrap_port']}"
            status, body = get(server + "/query")
            assert status == 200 and json.loads(body)["0"]["engine_id"] == f"7_dp{rank}"
            assert _decode(d, f"7_dp{rank}", server, _prefill(p, f"p{rank}"))[0] == 200
            status, doc = _decode(d, "7", server, _prefill(p, f"p{rank}"))  # the control
            assert status == 500 and "KV load failed" in json.dumps(doc)
        assert sorted(d.call(lambda ep: ep.state()["remote_engines"])) == ["7_dp0", "7_dp1"]
    assert "remote engine_id 7 not found from bootstrap server" in log.read_text()


def test_a_replaced_prefill_fails_pulls_under_the_id_a_decoder_met(tmp_path: Path) -> None:
    """The decoder keeps the worker address it learned for an id (vLLM's _remote_agents):
    after the prefill is replaced (a new process: a new side channel) under the same id and
    bootstrap server, its pulls go to the old address and fail (the control); the same
    replacement under an id of its own is queried and served."""
    kv_port, decode_kv = free_ports(2)
    log = tmp_path / "d0.log"
    server = f"http://127.0.0.1:{kv_port}"
    decode = {"endpoints": [_endpoint("d0", "decode", "9", decode_kv, log=str(log))]}
    with running_sim(decode) as d:
        with running_sim({"endpoints": [_endpoint("p0", "prefill", "7", kv_port)]}) as p:
            old = _worker(server)
            assert _decode(d, "7", server, _prefill(p))[0] == 200
        with running_sim({"endpoints": [_endpoint("p0", "prefill", "7", kv_port)]}) as p:
            assert _worker(server) != old  # the same server, a new incarnation's workers
            status, doc = _decode(d, "7", server, _prefill(p))  # the control: the old id
            assert status == 500 and "KV load failed" in json.dumps(doc)
        with running_sim({"endpoints": [_endpoint("p0", "prefill", "7-b", kv_port)]}) as p:
            assert _decode(d, "7-b", server, _prefill(p))[0] == 200
            assert _decode(d, "7-b", server, _prefill(p))[0] == 200  # kept: no new query
        assert d.call(lambda ep: ep.state()["remote_engines"]) == ["7", "7-b"]
    text = log.read_text()
    assert "pulling kv_caches for" in text and "failed: transfer failed:" in text


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
    assert all(w and all(a.startswith("tcp://") for a in w) for w in reg.remote_engines.values())


def test_sim_serve_reads_the_bootstrap_server_as_vllm_does() -> None:
    """``sim serve``: the port from VLLM_MOONCAKE_BOOTSTRAP_PORT (8998 unset; the config's
    kv_port is not read), the workers' address from VLLM_HOST_IP, and whose ranks the
    server names: an external-DP rank its own under key 0, the internal-LB head every
    rank; a bad port is refused in one line."""
    kv = ('{"kv_connector":"MooncakeConnector","kv_role":"kv_producer","kv_port":"7000",'
          '"engine_id":"5","kv_connector_extra_config":{"mooncake_protocol":"tcp"}}')  # fmt: skip
    external = parse_launch(["m", "--kv-transfer-config", kv, "--data-parallel-size", "2",
                             "--data-parallel-rank", "1"])  # fmt: skip
    env = {"VLLM_MOONCAKE_BOOTSTRAP_PORT": "9100", "VLLM_HOST_IP": "10.0.0.7"}
    ep = build_spec(external, env).endpoints[0]
    assert (ep.bootstrap_server_port, ep.worker_host, ep.kv_engine_id) == (9100, "10.0.0.7",
                                                                           "5_dp1")  # fmt: skip
    assert ep.bootstrap_ranks is None and serves_bootstrap(ep)
    head = parse_launch(["m", "--kv-transfer-config", kv, "--data-parallel-size", "2"])
    ep = build_spec(head, {}).endpoints[0]
    assert ep.bootstrap_server_port == 8998 and ep.bootstrap_ranks == {"0": 0, "1": 1}
    with pytest.raises(UsageError, match="VLLM_MOONCAKE_BOOTSTRAP_PORT"):
        build_spec(external, {"VLLM_MOONCAKE_BOOTSTRAP_PORT": "99999"})


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[" * 60_000,
        b'{"transfer_id": 3}',
        b"x" * (PULL_BYTES + 10),
        json.dumps({"transfer_id": "never-held"}).encode(),
    ],
)
def test_a_hostile_pull_gets_an_error_answer_and_nothing_else(
    pair: tuple[RunningSim, RunningSim, int, Path], body: bytes
) -> None:
    p, _, kv_port, _ = pair
    short = {"kv_hold_timeout_s": 0.05}  # no long wait for a transfer never offered
    p.call(lambda ep: setattr(ep, "profile", ep.profile.model_copy(update=short)))
    worker = _worker(f"http://127.0.0.1:{kv_port}").removeprefix("tcp://")
    status, answer = request("POST", f"http://{worker}{PULL_PATH}", raw=body)
    assert status == 200 and json.loads(answer)["status"] == "error"
    assert p.call(lambda ep: ep.health_status()) == 200
