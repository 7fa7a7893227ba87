"""Real vLLM on the CPU: the tiny model, local/1p1d-example through the proxy, dp2, death, teardown.

Each vLLM CPU instance takes about a minute to start on two cores, so the runs
are module-scoped and shared: local/single (the reference) and local/1p1d-example start
together, local/dp2 starts last. Every run goes through the real CLI
(``servekit up NAME --detach --free-ports``) in a temporary project folder.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from tests.helpers.cli import servekit_argv, servekit_cli
from tests.helpers.waiting import healthy, wait_until
from tests.local.conftest import alive

from servekit.client import OpenAIClient
from servekit.deployment import Deployment
from servekit.local import proctree
from servekit.local.rundir import RunDir
from servekit.local.state import RunState, read_state
from servekit.local.tinymodel import build_tiny_model
from servekit.local.tinymodel.tokenizer import corpus_text

pytestmark = pytest.mark.vllm

MODEL = "tiny-llama"
UP_TIMEOUT_S = 900


@dataclass
class Project:
    """A folder with the tiny model where servekit runs, and its environment."""

    root: Path

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SERVEKIT_RUNS": str(self.root / "runs")}

    def servekit(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``servekit ARGS`` run in this folder, with its environment."""
        return servekit_cli(*args, cwd=self.root, env=self.env, timeout=timeout)

    def start(self, layout: str) -> subprocess.Popen[str]:
        cmd = servekit_argv("up", layout, "--detach", "--free-ports")
        return subprocess.Popen(
            cmd,
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def run_dir(self, layout: str) -> RunDir:
        return RunDir(self.root / "runs" / layout.replace("/", "__"))

    def deployment(self, layout: str) -> Deployment:
        return Deployment.model_validate_json(self.run_dir(layout).deployment.read_text())

    def state(self, layout: str) -> RunState:
        state = read_state(self.run_dir(layout).state)
        assert state is not None
        return state

    def pids(self, layout: str) -> set[int]:
        roots = {p.pid for p in self.state(layout).processes if p.pid is not None}
        return proctree.members(roots) | {self.state(layout).supervisor_pid}


def _wait_up(project: Project, procs: dict[str, subprocess.Popen[str]]) -> None:
    """Every layout up, then every entry healthy (the proxy's /health: each stage routable).

    Layouts started side by side load the machine while the first is already up; its
    proxy may have set a slow-probed instance aside meanwhile, and takes it back after
    good probes. Tests start once the entries say so, not on the first request's luck.

    When one fails, every layout it was given is brought down before the error goes
    up: a module fixture that fails here never reaches its teardown, and in CI the
    run that had come up (local/single beside a failed local/1p1d-mooncake) kept
    its engine, 1.8 GB, for over an hour after the session ended.
    """
    try:
        for layout, proc in procs.items():
            out, _ = proc.communicate(timeout=UP_TIMEOUT_S)
            assert proc.returncode == 0, f"servekit up {layout} failed:\n{out}"
            assert project.run_dir(layout).deployment.is_file()
        for layout in procs:
            entry = project.deployment(layout).entry_url
            wait_until(partial(healthy, entry), f"{layout}'s entry {entry} healthy", 300, 0.5)
    except BaseException:
        for layout, proc in procs.items():
            if proc.poll() is None:
                proc.kill()
            project.servekit("down", layout, timeout=300)
        raise


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    root = tmp_path_factory.mktemp("project")
    build_tiny_model(root / ".servekit/models/tiny")
    project = Project(root)
    yield project
    project.servekit("down", timeout=300)


@pytest.fixture(scope="module")
def pd_and_single(project: Project) -> Project:
    """local/1p1d-example and local/single started side by side (three engines, one proxy)."""
    _wait_up(
        project, {name: project.start(name) for name in ("local/1p1d-example", "local/single")}
    )
    return project


@pytest.fixture(scope="module")
def dp2(project: Project) -> Project:
    _wait_up(project, {"local/dp2": project.start("local/dp2")})
    return project


def long_prompt(start: int) -> str:
    """Longer than one KV block (ExampleConnector hands over whole blocks only)."""
    return " ".join(corpus_text().split()[start : start + 260])


async def _complete(url: str, prompt: str, max_tokens: int = 24) -> tuple[str, int | None]:
    async with OpenAIClient(url, model=MODEL) as client:
        rec = await client.completion(
            {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
        )
    assert rec.ok, rec.error
    return rec.text, rec.usage.completion_tokens if rec.usage else None


async def _counter(url: str, name: str) -> float:
    async with OpenAIClient(url) as client:
        snap = await client.metrics()
    return snap.counter(name) or 0.0


def _url(dep: Deployment, role: str) -> str:
    return next(e.url for e in dep.endpoints if e.role == role)


@pytest.fixture
def companions_hidden() -> None:
    """transformers imports here as in the engines: torch companions that cannot load are hidden."""
    from servekit.local import companions

    companions.hide_in_process(companions.find_broken())


def test_tiny_model_in_vllm_answers_like_transformers(
    pd_and_single: Project, companions_hidden: None
) -> None:
    """Same weights, same tokenizer, same first tokens in both runtimes.

    Only a short greedy prefix is compared: vLLM's CPU kernels and transformers'
    eager bf16 path round differently, and a random model's margins eventually
    meet that noise. A misread weight or tokenizer diverges at the first token.
    """
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dep = pd_and_single.deployment("local/single")
    prompt = "The river runs north through the valley."
    _, count = asyncio.run(_complete(dep.entry_url, prompt, max_tokens=12))
    assert count == 12
    text, _ = asyncio.run(_complete(dep.entry_url, prompt, max_tokens=3))
    folder = str(pd_and_single.root / ".servekit/models/tiny")
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    ids = tok(prompt, return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=3, do_sample=False)
    assert tok.decode(out[0][ids["input_ids"].shape[1] :]) == text


def test_1p1d_round_trip_hands_kv_over_and_matches_single(pd_and_single: Project) -> None:
    pd = pd_and_single.deployment("local/1p1d-example")
    single = pd_and_single.deployment("local/single")
    decode = _url(pd, "decode")
    hits_before = asyncio.run(_counter(decode, "vllm:external_prefix_cache_hits"))
    prompt = long_prompt(100)
    pd_text, pd_count = asyncio.run(_complete(pd.entry_url, prompt))
    single_text, _ = asyncio.run(_complete(single.entry_url, prompt))
    assert pd_count == 24
    assert pd_text.encode() == single_text.encode()
    hits = asyncio.run(_counter(decode, "vllm:external_prefix_cache_hits")) - hits_before
    assert hits >= 128  # at least one whole block of the prompt came from the prefill
    decode_log = next(e.log for e in pd.endpoints if e.role == "decode")
    assert decode_log is not None
    assert "External Cache Hit" in decode_log.read_text(errors="replace")


def test_status_and_logs_show_the_run(pd_and_single: Project) -> None:
    status = pd_and_single.servekit("status", "local/1p1d-example")
    assert status.returncode == 0, status.stderr
    for name in ("prefill", "decode", "proxy"):
        assert name in status.stdout
    assert status.stdout.count(" ok ") >= 3
    logs = pd_and_single.servekit("logs", "decode", "--layout", "local/1p1d-example", "-n", "3")
    assert logs.returncode == 0, logs.stderr
    assert len(logs.stdout.splitlines()) == 3


def test_killed_instance_is_detected_and_everything_stops(pd_and_single: Project) -> None:
    project = pd_and_single
    everyone = project.pids("local/1p1d-example")
    decode_pid = project.state("local/1p1d-example").proc("decode").pid
    assert decode_pid is not None
    os.kill(decode_pid, signal.SIGKILL)
    deadline = time.monotonic() + 120
    while project.state("local/1p1d-example").phase != "failed" and time.monotonic() < deadline:
        time.sleep(0.5)
    state = project.state("local/1p1d-example")
    assert state.phase == "failed"
    assert state.message.startswith("process decode exited with code -9 (killed by SIGKILL)")
    assert state.proc("decode").exit_code == -9
    while alive(everyone) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert alive(everyone) == set()
    assert "exit code 1" in project.run_dir("local/1p1d-example").supervisor_log.read_text()
    assert not project.run_dir("local/1p1d-example").scratch.exists()
    status = project.servekit("status", "local/1p1d-example")
    assert "process decode exited with code -9" in status.stdout


def test_down_leaves_no_orphans(pd_and_single: Project) -> None:
    project = pd_and_single
    everyone = project.pids("local/single")
    assert len(everyone) >= 3  # supervisor, API server, engine core
    assert alive(everyone) == everyone
    result = project.servekit("down", "local/single", timeout=300)
    assert result.returncode == 0, result.stderr
    assert "local/single: stopped" in result.stdout
    assert alive(everyone) == set()
    assert project.state("local/single").phase == "stopped"
    assert not project.run_dir("local/single").deployment.exists()


def test_dp2_spreads_load_over_both_replicas(dp2: Project) -> None:
    dep = dp2.deployment("local/dp2")
    replicas = [e.url for e in dep.endpoints if e.role == "mixed"]
    assert len(replicas) == 2
    metric = "vllm:request_success"
    before = [asyncio.run(_counter(u, metric)) for u in replicas]

    async def burst() -> None:
        prompts = [long_prompt(50 * i) for i in range(8)]
        await asyncio.gather(*(_complete(dep.entry_url, p, max_tokens=16) for p in prompts))

    asyncio.run(burst())
    served = [asyncio.run(_counter(u, metric)) - b for u, b in zip(replicas, before, strict=True)]
    assert sum(served) == 8
    assert min(served) >= 1, f"one replica got everything: {served}"
    result = dp2.servekit("down", "local/dp2", timeout=300)
    assert result.returncode == 0
