"""The command line: parsing, one-line usage errors, the process entry points."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, strategies as st
from tests.helpers.cli import servekit_cli

from servekit.errors import UsageError
from servekit.proxy.config import (
    ProxyConfig,
    build_parser,
    cli_fields,
    flag_of,
    parse_args,
    to_argv,
)


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
        (["--replica", "http://a:1", "--connect-timeout", "nan"], "--connect-timeout"),
        (["--replica", "http://a:1", "--api-key", "s3cret"], "--api-key-env"),
        (["--replica", "http://a:1", "--api-key=s3cret"], "--api-key-file"),
        (["--replica", "http://a:1", "--admin-key", "x"], "--admin-key-env"),
        (["--replica", "http://a:1", "--api-key-env", "SERVEKIT_TEST_UNSET_VAR"], "unset"),
        (["--replica", "http://a:1", "--api-key-file", "/nonexistent/key"], "--api-key-file"),
        (["--replica", "http://a:1", "--admin-key-env", "A", "--admin-key-file", "B"], "one of"),
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
    proc = servekit_cli("proxy", "--help")
    assert proc.returncode == 0, proc.stderr
    for flag in (
        "--prefill",
        "--decode",
        "--replica",
        "--mode",
        "--api-key-env",
        "--admin",
        "--decode-policy",
    ):
        assert flag in proc.stdout


def test_bad_values_in_code_raise_the_same_one_line_errors() -> None:
    for kw, needle in (({"port": -1}, "--port"), ({"mode": "x"}, "--mode"),
                       ({"max_attempts": True}, "--max-attempts"),
                       ({"decode": "http://a:1"}, "--decode")):  # fmt: skip
        with pytest.raises(UsageError) as info:
            ProxyConfig(replica=("http://a:1",), **kw)  # type: ignore[arg-type]
        assert needle in str(info.value) and "\n" not in str(info.value)


def test_keys_come_from_an_environment_variable_or_a_file_never_argv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROXY_KEY", "  from-env\n")
    key_file = tmp_path / "admin.key"
    key_file.write_text("from-file\nignored\n")
    argv = ["--replica", "http://a:1", "--api-key-env", "PROXY_KEY", "--admin",
            "--admin-key-file", str(key_file)]  # fmt: skip
    cfg = parse_args(argv)
    assert cfg.api_key == "from-env" and cfg.admin_key == "from-file" and cfg.admin
    assert "from-env" not in repr(cfg) and "from-file" not in repr(cfg)
    assert parse_args(to_argv(cfg)) == cfg
    assert not any("from-" in a for a in to_argv(cfg))
    with pytest.raises(UsageError, match="api_key_env"):
        to_argv(ProxyConfig(replica=("http://a:1",), mode="replica", api_key="k"))
    key_file.write_text("\n")
    with pytest.raises(UsageError, match="first line is empty"):
        parse_args(argv)
    monkeypatch.delenv("PROXY_KEY")
    unread = parse_args(argv, read_keys=False)  # a launcher counting backends needs no key
    assert unread.api_key is None and unread.api_key_env == "PROXY_KEY"


def test_running_proxy_reads_its_key_from_the_environment_and_keeps_it_out_of_argv() -> None:
    port = free_port()
    argv = [sys.executable, "-m", "servekit.proxy", "--replica", "http://127.0.0.1:9",
            "--port", str(port), "--api-key-env", "PROXY_KEY"]  # fmt: skip
    env = {**os.environ, "PROXY_KEY": "s3cret-in-env"}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        url = f"http://127.0.0.1:{port}/v1/models"
        status = wait_status(url, {})
        assert status == 401
        assert wait_status(url, {"Authorization": "Bearer s3cret-in-env"}) == 503  # no replica up
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert b"s3cret" not in cmdline and b"PROXY_KEY" in cmdline
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def wait_status(url: str, headers: dict[str, str]) -> int:
    for _ in range(200):
        try:
            with urllib.request.urlopen(
                urllib.request.Request(url, headers=headers), timeout=1
            ) as r:
                return int(r.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{url} never answered")


def test_every_config_field_is_a_flag_and_defaults_come_from_the_dataclass() -> None:
    helptext = build_parser().format_help()
    for f in cli_fields():
        assert flag_of(f.name) in helptext
    assert "--api-key " not in helptext and "--admin-key " not in helptext
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
        api_key_env=draw(st.none() | st.text("abcXYZ019_", min_size=1, max_size=12)),
        debug=draw(st.booleans()),
        decode_policy=draw(st.sampled_from(["least-loaded", "round-robin", "prefix-affinity"])),
        decode_timeout_s=draw(st.floats(0.001, 1e5)),
        max_attempts=draw(st.integers(1, 10)),
        log_level=draw(st.sampled_from(["debug", "info", "warning", "error"])),
    )


@given(configs())
def test_to_argv_round_trips_through_the_parser(cfg: ProxyConfig) -> None:
    env = {cfg.api_key_env: "k"} if cfg.api_key_env else {}
    with mock.patch.dict(os.environ, env):
        parsed = parse_args(to_argv(cfg))
    assert parsed == dataclasses.replace(cfg, api_key="k" if env else None)


def test_the_docs_flag_table_names_every_flag() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "proxy.md"
    section = docs.read_text().split("## Flags", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    documented = {flag for row in rows for flag in re.findall(r"`(--[a-z-]+)", row)}
    assert documented == {flag_of(f.name) for f in cli_fields()}


@pytest.mark.parametrize("host", ["", " ", "[]"])
def test_an_empty_host_is_refused_not_bound_on_every_interface(host: str) -> None:
    """Issue 36 item 8: ``--host ""`` bound every interface while the log said 127.0.0.1."""
    with pytest.raises(UsageError, match=r"--host: .* every interface; give an address"):
        parse_args(["--replica", "http://127.0.0.1:1", "--host", host], read_keys=False)
