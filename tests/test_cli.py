"""Every documented command exists, answers --help, and the root maps usage errors to exit 2."""

from __future__ import annotations

import pytest
from tests.helpers.cli import servekit_cli, servekit_inproc, wide_env

DOCUMENTED = [
    ["layouts", "list"],
    ["layouts", "show"],
    ["layouts", "check"],
    ["render"],
    ["defaults"],
    ["model", "tiny"],
    ["up"],
    ["down"],
    ["status"],
    ["logs"],
    ["demo"],
    ["proxy"],
    ["sim"],
    ["accept"],
    ["bench"],
    ["kit", "build"],
    ["kit", "verify"],
    ["kit", "rebuild"],
    ["kit", "inspect"],
    ["verify"],
    ["catalog", "site"],
]


@pytest.mark.parametrize("command", DOCUMENTED, ids=[" ".join(c) for c in DOCUMENTED])
def test_documented_command_answers_help(command: list[str]) -> None:
    result = servekit_cli(*command, "--help", env=wide_env(NO_COLOR="1"))
    assert result.returncode == 0, result.stderr
    assert "Usage" in result.stdout or "usage" in result.stdout


def test_root_help_lists_every_group() -> None:
    out = servekit_cli("--help", env=wide_env(NO_COLOR="1")).stdout
    for group in {c[0] for c in DOCUMENTED}:
        assert group in out


def test_unknown_command_is_a_usage_error() -> None:
    result = servekit_cli("frobnicate", env=wide_env(NO_COLOR="1"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_strict_check_fails_on_the_catalogs_warnings_and_plain_check_passes() -> None:
    assert servekit_cli("layouts", "check", env=wide_env(NO_COLOR="1")).returncode == 0
    strict = servekit_cli("layouts", "check", "--strict", env=wide_env(NO_COLOR="1"))
    assert strict.returncode == 1
    # the real finding, on a3/2p1x2d's layout (the old name is an alias)
    found = strict.stdout
    assert "a3/deepseekv4-flash/2p1x2d" in found and "AscendDirectTransport" in found


PROXY_ARGV = [
    ["--replica", "http://127.0.0.1:1", "http://127.0.0.1:2", "--port", "0"],
    ["--prefill", "http://a:1", "http://b:2/", "--decode", "http://c:3", "--mode", "prompt-keyed"],
    ["--prefill", "http://a:1", "--prefill", "http://b:2", "--decode", "http://c:3", "--admin"],
    ["--decode", "http://c:3", "--prefill", "http://a:1", "--connect-timeout=2.5", "--debug"],
]


@pytest.mark.parametrize("argv", PROXY_ARGV)
def test_servekit_proxy_and_the_module_entry_build_the_same_config(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import servekit.proxy.server
    from servekit.proxy.config import parse_args

    seen: list[object] = []
    monkeypatch.setattr(servekit.proxy.server, "run", seen.append)
    result = servekit_inproc("proxy", *argv)
    assert result.returncode == 0, result.stdout + result.stderr
    assert seen == [parse_args(argv)]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--api-key", "k", "--replica", "http://a:1"], "--api-key: keys are not taken"),
        (["--replica", "http://a:1", "--mode", "pd"], "--mode applies to PD"),
        (["--prefill", "http://a:1", "--decode", "http://b:2", "--mode", "replica"], "--mode"),
        (["--prefill", "ftp://a:1", "--decode", "http://b:2"], "expected http://HOST:PORT"),
        (["--replica", "http://a:1", "--port", "70000"], "--port: must be at most 65535"),
    ],
)
def test_servekit_proxy_refuses_bad_flags_in_one_line(argv: list[str], needle: str) -> None:
    result = servekit_cli("proxy", *argv, env=wide_env(NO_COLOR="1"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and needle in result.stderr
