"""What the engines say they are: the real simulator, vLLM's marks, and servers that lie.

The simulator and a lying front run for real on loopback; the vLLM answer is
the one vLLM 0.32's code gives (``{"version": VLLM_VERSION}``, uvicorn's
``Server`` header, ``vllm:cache_config_info``), fed through a probe, since a
real vLLM engine runs only under ``-m vllm`` (tests/report/test_verify_real_runner.py
records its run as ``vllm`` from these same marks).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from hypothesis import given, settings, strategies as st
from tests.helpers.liar import lying_front
from tests.report.support import sim_spec

from servekit.deployment import Deployment, Endpoint
from servekit.sim.testing import running_sim
from servekit.verify.identity import Answer, engine_verdict, identify, log_facts, probe_url

VLLM_METRICS = 'vllm:cache_config_info{block_size="16"} 1.0\nvllm:num_requests_running 0.0\n'


def vllm_like(
    server: str = "uvicorn", metrics: str = VLLM_METRICS, version: str = "0.32.0"
) -> Callable[[str], Answer]:
    """A probe answering as vLLM 0.32 does (each mark can be taken away)."""

    def probe(url: str) -> Answer:
        if url.endswith("/version"):
            return Answer(200, server, json.dumps({"version": version}))
        if url.endswith("/metrics"):
            return Answer(200, server, metrics)
        return Answer(404, server, '{"detail":"Not Found"}')

    return probe


def one(url: str) -> Deployment:
    return Deployment(entry_url=url, endpoints=(Endpoint(name="e0", role="mixed", url=url),))


def test_the_real_simulator_says_it_is_the_simulator() -> None:
    with running_sim(sim_spec()) as sim:
        found = identify(one(sim.url))
        assert found.kind == "sim" and found.engine == "sim"
        assert found.observed["engine"] == "1/1 engines answered as servekit's simulator"
        assert found.versions == {} and found.image == "not observed"


def test_the_simulator_behind_a_front_that_lies_is_unconfirmed() -> None:
    with running_sim(sim_spec()) as sim, lying_front(sim.url) as liar:
        found = identify(one(liar))
        assert probe_url(f"{liar}/version").body == '{"version": "0.32.0"}'
    assert found.kind == "unconfirmed" and found.engine == "external"
    assert "says 0.32.0 but Server header" in found.why and "not uvicorn" in found.why


def test_a_server_answering_only_version_is_unconfirmed() -> None:
    with running_sim(sim_spec()) as sim, lying_front(sim.url, version_only=True) as liar:
        found = identify(one(liar))
    assert found.kind == "unconfirmed"
    assert "/metrics has no vllm:cache_config_info" in found.why


def test_vllms_marks_identify_vllm_and_its_version() -> None:
    """Positive control for the rule: every mark present identifies vLLM."""
    found = identify(one("http://10.0.0.1:8000"), vllm_like())
    assert found.kind == "vllm" and found.versions == {"vllm": "0.32.0"}
    assert found.observed["vllm"] == "GET /version on 1 engine(s)"
    assert found.observed["image"] == "not observed" and found.image == "not observed"


def test_each_missing_mark_makes_it_unconfirmed() -> None:
    url = "http://10.0.0.1:8000"
    assert engine_verdict(url, vllm_like(server="nginx")).kind == "unconfirmed"
    assert engine_verdict(url, vllm_like(metrics="up 1\n")).kind == "unconfirmed"
    assert engine_verdict(url, vllm_like(version="latest")).kind == "unconfirmed"
    assert engine_verdict(url, lambda u: Answer(0)).why.endswith("/version did not answer")


def test_engines_that_disagree_leave_the_version_unrecorded() -> None:
    dep = Deployment(
        entry_url="http://a:1",
        endpoints=(
            Endpoint(name="a", role="prefill", url="http://a:1"),
            Endpoint(name="b", role="decode", url="http://b:1"),
        ),
    )

    def probe(url: str) -> Answer:
        return vllm_like(version="0.31.0" if "//b" in url else "0.32.0")(url)

    found = identify(dep, probe)
    assert found.kind == "vllm" and "vllm" not in found.versions
    assert "disagree" in found.observed["vllm"]


def test_one_simulated_engine_makes_the_run_simulated() -> None:
    with running_sim(sim_spec()) as sim:
        dep = Deployment(
            entry_url=sim.url,
            endpoints=(
                Endpoint(name="a", role="prefill", url=sim.url),
                Endpoint(name="b", role="decode", url="http://10.0.0.1:8000"),
            ),
        )
        real = vllm_like()
        found = identify(dep, lambda u: probe_url(u) if u.startswith(sim.url) else real(u))
    assert found.kind == "sim"


def test_the_logs_start_up_line_gives_the_version_when_all_agree(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_bytes(b"INFO vLLM server version 0.32.0, serving model m\n")
    (tmp_path / "b.log").write_bytes(b"\xff\xfe garbage\nvLLM server version 0.32.0, x\n")
    assert log_facts([tmp_path / "a.log", tmp_path / "b.log", tmp_path / "gone.log"]) == {
        "vllm": "0.32.0"
    }
    (tmp_path / "c.log").write_bytes(b"vLLM server version 0.31.0, serving model m\n")
    assert log_facts(sorted(tmp_path.glob("*.log"))) == {}


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 600),
    st.text(max_size=60),
    st.binary(max_size=400).map(lambda b: b.decode("latin-1")),
)
def test_hostile_answers_never_crash_and_never_identify_vllm_without_every_mark(
    status: int, server: str, body: str
) -> None:
    def probe(url: str) -> Answer:
        return Answer(status, server, body)

    verdict = engine_verdict("http://h:1", probe)
    assert verdict.kind in ("sim", "unconfirmed", "vllm")
    if verdict.kind == "vllm":
        assert status == 200 and server.strip().lower() == "uvicorn"
        assert "vllm:cache_config_info" in body


def test_a_silent_engine_stops_the_probing_at_once() -> None:
    asked: list[str] = []

    def silent(url: str) -> Answer:
        asked.append(url)
        return Answer(0)

    engines = tuple(
        Endpoint(name=f"d{i}", role="decode", url=f"http://10.0.0.{i}:1") for i in range(50)
    )
    found = identify(Deployment(entry_url="http://10.0.0.1:1", endpoints=engines), silent)
    assert found.kind == "unconfirmed" and "did not answer" in found.why
    assert len(asked) == 2  # /version and /sim/state of the first engine only
