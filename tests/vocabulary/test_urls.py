"""The one URL check (issue 25): every flag and file that takes http://HOST:PORT agrees.

The proxy's own check used to accept ``http://x:99999`` and ``http://x:0/?a#b``;
it now uses this one, so those are refused there too.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from hypothesis import given, strategies as st

from servekit.errors import UsageError
from servekit.proxy.config import parse_args, parse_bootstrap
from servekit.vocabulary import check_url, is_url, url_for


@pytest.mark.parametrize(
    "url", ["http://x:99999", "http://x:0/?a#b", "http://x:0", "http://x:1/?a", "http://x:1/#b"]
)
def test_the_proxy_refuses_what_the_deployment_refuses(url: str) -> None:
    """The bug of issue 25: the proxy's check was looser than deployment.entry_url."""
    with pytest.raises(UsageError) as err:
        parse_args(["--prefill", url, "--decode", "http://b:2"])
    assert str(err.value).startswith(f"--prefill {url}:") and "\n" not in str(err.value)
    with pytest.raises(UsageError, match="--prefill-bootstrap"):
        parse_bootstrap(f"e0={url}")


def test_a_good_backend_is_kept_without_its_slash() -> None:
    assert check_url("http://10.0.0.1:8000/", "--decode") == "http://10.0.0.1:8000"
    assert parse_args(["--replica", "https://h:443/"]).replica == ("https://h:443",)


@pytest.mark.parametrize(
    ("text", "url"),
    [("http://h:1", True), ("https://h", True), ("a3/1p1d", False), ("ftp://h", False),
     (None, False), ("deployment.json", False)],
)  # fmt: skip
def test_is_url_tells_a_url_from_a_name_or_file(text: str | None, url: bool) -> None:
    assert is_url(text) is url


ports = st.integers(min_value=-5, max_value=70_000)


@given(ports)
def test_a_port_is_accepted_exactly_when_it_is_1_to_65535(port: int) -> None:
    url = f"http://h:{port}"
    try:
        got = check_url(url, "--decode")
    except UsageError as exc:
        assert not 1 <= port <= 65535
        assert str(exc).startswith("--decode ") and "\n" not in str(exc)
    else:
        assert 1 <= port <= 65535 and got == url


@given(st.text(max_size=30), st.sampled_from(["", "?", "#", "?a#b"]))
def test_query_or_fragment_is_never_a_servers_root(tail: str, suffix: str) -> None:
    url = f"http://h:8000/{tail}{suffix}"
    try:
        got = check_url(url, "--prefill")
    except UsageError as exc:
        assert "\n" not in str(exc)
    else:
        assert "?" not in got and "#" not in got


@given(st.text(max_size=40))
def test_any_text_is_a_url_or_one_usage_error_naming_the_flag(text: str) -> None:
    try:
        got = check_url(text, "--replica")
    except UsageError as exc:
        assert str(exc).startswith("--replica ") and "\n" not in str(exc)
    else:
        assert is_url(got) and not got.endswith("/")


@pytest.mark.parametrize(
    ("host", "port", "path", "scheme", "url"),
    [
        ("10.0.0.1", 8000, "", "http", "http://10.0.0.1:8000"),
        ("fd00::1", 7100, "/v1/metaserver", "http", "http://[fd00::1]:7100/v1/metaserver"),
        ("[::1]", 5557, "", "tcp", "tcp://[::1]:5557"),
        ("*", 5557, "", "tcp", "tcp://*:5557"),
        ("sk-prefill-0.sk-prefill", "7100-7115", "", "http", "http://sk-prefill-0.sk-prefill:7100-7115"),
    ],
)  # fmt: skip
def test_the_one_url_builder_brackets_ipv6_literals(
    host: str, port: int | str, path: str, scheme: str, url: str
) -> None:
    assert url_for(host, port, path, scheme=scheme) == url


@given(
    st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(str),
    st.integers(1, 65535),
)
def test_every_built_url_passes_the_check_and_gives_its_host_and_port_back(
    host: str, port: int
) -> None:
    built = url_for(host, port)
    assert check_url(built) == built
    parts = urlsplit(built)
    assert (parts.hostname, parts.port) == (host.lower(), port)
