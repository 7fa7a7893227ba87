"""The command line: parsing, one-line usage errors, the process entry points."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servekit.errors import UsageError
from servekit.proxy.config import ProxyConfig, build_parser, flag_of, parse_args, to_argv


def test_pd_replica_and_prompt_keyed_parse() -> None:
    cfg = parse_args(["--prefill", "http://a:1/", "--decode", "http://b:2", "http://c:3"])
    assert cfg.mode == "pd" and cfg.prefill == ("http://a:1",) and len(cfg.decode) == 2
    cfg = parse_args(["--replica", "http://a:1", "--port", "9", "--decode-policy", "round-robin"])
    assert cfg.mode == "replica" and cfg.port == 9 and cfg.decode_policy == "round-robin"
    cfg = parse_args(
        ["--prefill", "http://a:1", "--decode", "http://b:2", "--mode", "prompt-keyed"]
    )
    assert cfg.mode == "prompt-keyed" and cfg.stage_roles == ("prefill", "decode")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--prefill", "http://a:1"], "--decode"),
        (["--replica", "http://a:1", "--decode", "http://b:1"], "--replica"),
        (["--prefill", "a:1", "--decode", "http://b:1"], "--prefill a:1"),
        (["--replica", "http://a:1", "--port", "70000"], "--port"),
        (["--replica", "http://a:1", "--max-attempts", "0"], "--max-attempts"),
        (["--replica", "http://a:1", "--prefill-policy", "random"], "--prefill-policy"),
        (["--replica", "http://a:1", "--mode", "pd"], "--mode"),
        (["--replica", "http://a:1", "--prefill-timeout", "0"], "--prefill-timeout"),
    ],
)
def test_bad_flags_raise_one_line_usage_errors(argv: list[str], needle: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_args(argv)
    assert needle in str(info.value) and "\n" not in str(info.value)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_module_entry_exits_2_on_bad_input_without_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "servekit.proxy", "--prefill", "http://a:1"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


@pytest.mark.parametrize("entry", [["-m", "servekit.proxy"], ["-m", "servekit", "proxy"]])
def test_process_serves_health_until_terminated(entry: list[str]) -> None:
    """What `servekit up` relies on: start it, poll /health, stop it with SIGTERM."""
    port = free_port()
    argv = [sys.executable, *entry, "--replica", "http://127.0.0.1:9", "--port", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        doc = None
        for _ in range(200):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                    pass
            except urllib.error.HTTPError as exc:  # 503: the replica is not there
                doc = json.loads(exc.read())
                break
            except OSError:
                time.sleep(0.05)
        assert doc is not None and doc["status"] == "unavailable" and doc["replica_instances"] == 0
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_servekit_proxy_help_lists_the_same_flags() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "servekit", "proxy", "--help"], capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for flag in ("--prefill", "--decode", "--replica", "--mode", "--api-key", "--decode-policy"):
        assert flag in proc.stdout


def test_every_config_field_is_a_flag_and_defaults_come_from_the_model() -> None:
    helptext = build_parser().format_help()
    for name in ProxyConfig.model_fields:
        assert flag_of(name) in helptext
    cfg = parse_args(["--replica", "http://a:1"])
    defaults = ProxyConfig(replica=("http://a:1",), mode="replica")
    assert cfg == defaults
    tuned = parse_args(["--replica", "http://a:1", "--decode-timeout", "7", "--debug"])
    assert tuned.decode_timeout_s == 7.0 and tuned.debug


urls = st.lists(st.integers(1, 65535).map(lambda p: f"http://10.0.0.1:{p}"), min_size=1, max_size=3)


@st.composite
def configs(draw: st.DrawFn) -> ProxyConfig:
    pd = draw(st.booleans())
    topology: dict[str, object] = (
        {"prefill": tuple(draw(urls)), "decode": tuple(draw(urls)),
         "mode": draw(st.sampled_from(["pd", "prompt-keyed"]))}
        if pd else {"replica": tuple(draw(urls)), "mode": "replica"}
    )  # fmt: skip
    return ProxyConfig(
        **topology,
        port=draw(st.integers(0, 65535)),
        api_key=draw(st.none() | st.text("abcXYZ019-_", min_size=1, max_size=12)),
        debug=draw(st.booleans()),
        decode_policy=draw(st.sampled_from(["least-loaded", "round-robin", "prefix-affinity"])),
        decode_timeout_s=draw(st.floats(0.001, 1e5)),
        max_attempts=draw(st.integers(1, 10)),
        log_level=draw(st.sampled_from(["debug", "info", "warning", "error"])),
    )


@given(configs())
def test_to_argv_round_trips_through_the_parser(cfg: ProxyConfig) -> None:
    assert parse_args(to_argv(cfg)) == cfg
