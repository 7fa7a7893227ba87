"""``servekit sim serve``: the drop-in ``vllm serve`` that rendered launch scripts run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, strategies as st
from tests.helpers.cli import servekit_cli

from servekit.errors import UsageError
from servekit.sim.profile import load_profile
from servekit.sim.vllmargs import group_flags, parse_launch, parse_size
from servekit.sim.vllmserve import build_spec

from .webclient import get, metric, post

KV_DECODE = (
    '{"kv_connector":"MooncakeHybridConnector","kv_role":"kv_consumer","kv_port":"36100",'
    '"engine_id":"1","kv_connector_extra_config":{"prefill":{"dp_size":4,"tp_size":4},'
    '"decode":{"dp_size":16,"tp_size":1}}}'
)
KV_PREFILL = KV_DECODE.replace("kv_consumer", "kv_producer").replace('"36100"', '"36000"')
KV_PREFILL = KV_PREFILL.replace('"engine_id":"1"', '"engine_id":"0"')
GUARD = "servekit_decode_guard.DecodeGuardMiddleware"  # as rendered scripts load it
WRAPPER = '#!/bin/sh\n[ "$1" = serve ] && shift\nexec {servekit} sim serve "$@"\n'


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def decode_argv(port: int) -> list[str]:
    """The exact command line a3/1p1d's rendered decode rank 3 runs (from its Plan), on ``port``."""
    from servekit.catalog.loader import load
    from servekit.render import PlanOptions, build_plan

    layout = load("a3/1p1d").layout
    plan = build_plan(layout, PlanOptions(hosts=("127.0.0.1",) * 2, bind_host="127.0.0.1"))
    argv = list(next(p for p in plan.processes if p.name == "decode0.dp3").argv)
    argv[argv.index("--port") + 1] = str(port)
    return argv


@pytest.fixture
def wrapper_path(tmp_path: Path) -> str:
    """A folder holding the documented two-line ``vllm`` wrapper, first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    servekit = Path(sys.executable).with_name("servekit")
    vllm = bin_dir / "vllm"
    vllm.write_text(WRAPPER.format(servekit=servekit))
    vllm.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


def start(
    procs: list[subprocess.Popen[str]], argv: list[str], path: str, **env: str
) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PATH": path, **env},
    )
    procs.append(proc)
    return proc


def wait_healthy(url: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            if get(f"{url}/health", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{url} never became healthy")


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


def test_a_rendered_decode_rank_runs_as_the_engine_its_flags_describe(
    wrapper_path: str, procs: list[subprocess.Popen[str]]
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start(procs, decode_argv(port), wrapper_path)
    wait_healthy(url, proc)
    _, raw = get(f"{url}/sim/state")
    state = json.loads(raw)
    assert (state["role"], state["engine_id"]) == ("decode", "1")
    launch = state["launch"]
    assert launch["dp_rank"] == 3 and launch["dp_size"] == 16 and launch["ranks"] == [3]
    assert launch["guard"] is True and launch["kv_port"] == 36100 and launch["tp"] == 1
    assert launch["max_model_len"] == 1048576 and launch["profile"] == "a3-dsv4-flash"
    ignored = launch["ignored"]
    assert ignored["enable-expert-parallel"] is True and ignored["seed"] == "1024"
    assert ignored["quantization"] == "ascend" and ignored["data-parallel-rpc-port"] == "12321"
    assert ignored["disable-hybrid-kv-cache-manager"] is False  # --no-X, recorded as X: false
    assert json.loads(ignored["additional-config"])["recompute_scheduler_enable"] is True
    assert "kv-transfer-config" not in ignored and "middleware" not in ignored
    _, models = get(f"{url}/v1/models")
    card = json.loads(models)["data"][0]
    assert card["id"] == "deepseek_v4" and card["max_model_len"] == 1048576
    status, doc = post(
        f"{url}/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}
    )
    assert status == 400 and doc["error"]["code"] == "decode_role_requires_kv_transfer_params"
    _, text = get(f"{url}/metrics")
    assert metric(text, "vllm:num_requests_running", engine="3") == 0
    err = stop(proc)
    assert "simulating decode engine 1, DP rank(s) 3 of 16, TP 1, guard on" in err
    assert '"enable-expert-parallel": true' in err  # the recorded flags, in the engine log
    assert "GPU KV cache size: 2,987,648 tokens" in err


def test_headless_ranks_stay_up_without_an_api_until_sigterm(
    tmp_path: Path, wrapper_path: str, procs: list[subprocess.Popen[str]]
) -> None:
    argv = [
        "vllm", "serve", "/root/model", "--headless", "--data-parallel-size", "16",
        "--data-parallel-size-local", "8", "--data-parallel-start-rank", "8",
        "--kv-transfer-config", KV_DECODE,
    ]  # fmt: skip
    log = tmp_path / "headless.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            argv, stderr=sink, text=True, env={**os.environ, "PATH": wrapper_path}
        )
    procs.append(proc)
    said = "headless rank(s) 8,9,10,11,12,13,14,15 of engine 1: no API server"
    deadline = time.monotonic() + 30
    while said not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    time.sleep(0.5)
    assert proc.poll() is None  # still alive, as a supervisor expects
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def test_local_ranks_behind_one_api_server_share_it() -> None:
    argv = ["/root/model", "--port", "0", "-dp", "4", "-dpl", "2", "--served-model-name", "m"]
    spec = build_spec(parse_launch(argv), {"SERVEKIT_SIM_PROFILE": "zero"})
    (ep,) = spec.endpoints
    assert ep.dp_rank == 0 and ep.dp_size == 4 and ep.launch and ep.launch["ranks"] == [0, 1]
    one = load_profile("zero")
    both = ep.resolved_profile()  # two engines' capacity behind one server
    assert both.max_num_seqs == 2 * one.max_num_seqs
    assert both.kv_capacity_tokens == 2 * one.kv_capacity_tokens


@pytest.mark.slow
def test_prefill_and_decode_processes_hand_kv_over_through_the_real_proxy(
    tmp_path: Path, wrapper_path: str, procs: list[subprocess.Popen[str]]
) -> None:
    from servekit.accept.simstack import running_proxy
    from servekit.proxy import ProxyConfig

    p_port, d_port = free_port(), free_port()
    common = ["--served-model-name", "m", "--host", "127.0.0.1"]
    prefill = ["vllm", "serve", "/m", "--port", str(p_port), "--kv-transfer-config", KV_PREFILL]
    decode = ["vllm", "serve", "/m", "--port", str(d_port), "--kv-transfer-config", KV_DECODE]
    decode += ["--middleware", GUARD]
    env = {"SERVEKIT_SIM_PROFILE": "zero"}
    p = start(procs, [*prefill, *common], wrapper_path, **env)
    d = start(procs, [*decode, *common], wrapper_path, **env)
    p_url, d_url = f"http://127.0.0.1:{p_port}", f"http://127.0.0.1:{d_port}"
    wait_healthy(p_url, p)
    wait_healthy(d_url, d)
    config = ProxyConfig(prefill=(p_url,), decode=(d_url,))
    with running_proxy(config, tmp_path / "proxy.log") as proxy:
        body = {"model": "m", "prompt": "Tell me about the river. " * 40, "max_tokens": 8}
        status, doc = post(f"{proxy}/v1/completions", body)
    assert status == 200, doc
    assert doc["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    _, text = get(f"{d_url}/metrics")
    assert metric(text, "vllm:external_prefix_cache_hits_total") > 0
    assert "kv_transfer" not in stop(d)


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (["--port", "1"], {}, "give the model"),
        (["/m", "--kv-transfer-config", "{nope"], {}, "--kv-transfer-config: not valid JSON"),
        (["/m", "-dp", "2", "--data-parallel-rank", "2"], {}, "not below --data-parallel-size 2"),
        (["/m", "--port", "x"], {}, "--port"),
        (["/m", "--max-model-len", "lots"], {}, "--max-model-len 'lots'"),
        (["/m"], {"SERVEKIT_SIM_SPEED": "fast"}, "SERVEKIT_SIM_SPEED=fast"),
        (["/m"], {"SERVEKIT_SIM_PROFILE": "nope"}, "unknown profile 'nope'"),
        (["/m"], {"SERVEKIT_SIM_FAULTS": '{"dead": 3}'}, "faults: field dead"),
    ],
)
def test_bad_command_lines_are_one_line_usage_errors(
    argv: list[str], env: dict[str, str], needle: str
) -> None:
    with pytest.raises(UsageError) as info:
        build_spec(parse_launch(argv), env)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_module_entry_exits_2_with_one_line(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "servekit.sim", "serve", "/m", "-dp", "1", "-dpn", "5"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.startswith("error: sim serve:") and out.stderr.count("\n") == 1


def test_roles_modes_guard_and_speed_follow_the_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    example = '{"kv_connector":"ExampleConnector","kv_role":"kv_producer"}'
    launch = parse_launch(["/m", "--kv-transfer-config", example])
    assert (launch.role, launch.kv_mode, launch.guard) == ("prefill", "prompt", False)
    plain = parse_launch(["/m", "--middleware", GUARD, "--speed", "50"])
    assert (plain.role, plain.guard) == ("mixed", True)
    spec = build_spec(plain, {"SERVEKIT_SIM_SPEED": "2"})
    assert spec.speed == 50 and spec.time_scale == pytest.approx(0.02)
    assert build_spec(parse_launch(["/m"]), {"SERVEKIT_SIM_SPEED": "4"}).speed == 4
    decode = parse_launch(["/m", "--kv-transfer-config", KV_DECODE])
    assert build_spec(decode, {}).endpoints[0].unguarded_incident  # no guard: the incident
    monkeypatch.setenv("SERVEKIT_DECODE_GUARD", "off")  # the middleware's own switch
    assert not parse_launch(["/m", "--middleware", GUARD]).guard


def test_a_tiny_local_model_gets_the_cpu_profile(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 256}))
    spec = build_spec(parse_launch([str(tmp_path)]), {})
    assert spec.endpoints[0].resolved_profile().name == "cpu-tiny"
    assert build_spec(parse_launch(["/root/model"]), {}).endpoints[0].resolved_profile().name == (
        "a3-dsv4-flash"
    )


flag_names = st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True).filter(
    lambda n: not n.startswith("no-")
)
values = st.from_regex(r"[A-Za-z0-9_{}:\"/.]{1,12}", fullmatch=True)


@given(st.dictionaries(flag_names, values, max_size=6))
def test_both_flag_forms_are_recorded_alike(flags: dict[str, str]) -> None:
    spaced = [t for name, value in flags.items() for t in (f"--{name}", value)]
    joined = [f"--{name}={value}" for name, value in flags.items()]
    assert group_flags(spaced) == group_flags(joined) == flags


def test_switches_and_negated_switches() -> None:
    assert group_flags(["--trust-remote-code", "--no-enable-chunked-prefill"]) == {
        "trust-remote-code": True,
        "enable-chunked-prefill": False,
    }
    assert group_flags(["--offset", "-1"]) == {"offset": "-1"}


def test_sizes_as_vllm_reads_them() -> None:
    assert parse_size("1048576", "--max-model-len") == 1048576
    assert parse_size("128k", "--max-model-len") == 128_000
    assert parse_size("1M", "--max-model-len") == 1 << 20
    assert parse_size("144K", "--max-model-len") == 147456


def test_help_lists_the_flags_it_acts_on_and_serves_nothing() -> None:
    out = servekit_cli("sim", "serve", "/m", "--help", timeout=60)
    assert out.returncode == 0, out.stderr
    for flag in ("--kv-transfer-config", "--data-parallel-rank", "--headless", "--middleware"):
        assert flag in out.stdout


def test_secret_flags_are_never_shown_or_logged(
    wrapper_path: str, procs: list[subprocess.Popen[str]]
) -> None:
    """/sim/state answers anyone who reaches the port; the engine log is copied around."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [*decode_argv(port), "--api-key", "s3cr3t-1", "--hf-token=s3cr3t-2"]
    proc = start(procs, argv, wrapper_path)
    wait_healthy(url, proc)
    _, raw = get(f"{url}/sim/state")
    launch = json.loads(raw)["launch"]
    assert "s3cr3t" not in json.dumps(launch)
    assert launch["argv"][launch["argv"].index("--api-key") + 1] == "<redacted>"
    assert "--hf-token=<redacted>" in launch["argv"]
    assert launch["ignored"]["api-key"] == "<redacted>"
    err = stop(proc)
    assert "s3cr3t" not in err and "<redacted>" in err


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["--api-key", "x"], ["--api-key", "<redacted>"]),
        (["--api-key=x"], ["--api-key=<redacted>"]),
        (["--hf-token", "x", "--port", "1"], ["--hf-token", "<redacted>", "--port", "1"]),
        (
            ["--tokenizer", "t", "--max-num-batched-tokens", "9"],
            ["--tokenizer", "t", "--max-num-batched-tokens", "9"],
        ),
        (["--api-key", "--port", "1"], ["--api-key", "--port", "1"]),
    ],
)
def test_redaction_hides_values_of_secret_flags_only(argv: list[str], shown: list[str]) -> None:
    from servekit.sim.vllmserve import redacted_argv

    assert redacted_argv(argv) == shown


def _stream_then_sigterm(proc: subprocess.Popen[str], url: str) -> tuple[int, bool]:
    """A streamed answer of 100 tokens; SIGTERM after its fifth event: (events, [DONE] seen)."""
    body = json.dumps({"model": "m", "prompt": "hello", "max_tokens": 100, "temperature": 0,
                       "ignore_eos": True, "stream": True}).encode()  # fmt: skip
    conn = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=30)
    conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)  # fmt: skip
    events, done, raw = 0, False, b""
    with conn:
        while chunk := conn.recv(65536):
            raw += chunk
            seen = raw.count(b"data: ")
            if events < 5 <= seen:
                proc.send_signal(signal.SIGTERM)
            events, done = seen, b"data: [DONE]" in raw
    return events, done


@pytest.mark.slow
@pytest.mark.parametrize(("flags", "finished"), [([], False), (["--shutdown-timeout", "30"], True)])
def test_sigterm_cuts_requests_in_flight_as_vllm_does_unless_given_time(
    flags: list[str], finished: bool, wrapper_path: str, procs: list[subprocess.Popen[str]]
) -> None:
    """vLLM's API server aborts what is in flight on SIGTERM (``--shutdown-timeout`` 0, its
    default) and lets it finish for N s otherwise; the simulated engine does the same, so
    a platform's drain-before-stop is tested against what a real engine does without it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start(procs, ["vllm", "serve", "m", "--port", str(port), "--host", "127.0.0.1",
                         "--speed", "2", *flags], wrapper_path)  # fmt: skip
    wait_healthy(url, proc)
    events, done = _stream_then_sigterm(proc, url)
    assert done is finished, events  # cut after the SIGTERM, or whole (about 35 events)
    proc.communicate(timeout=30)
    assert proc.returncode == 0
