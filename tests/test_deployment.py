"""The Deployment model: relay pages split by engine, --target FILE, where metrics come from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, strategies as st
from prometheus_client.parser import text_string_to_metric_families

from servekit.deployment import (
    Deployment,
    Endpoint,
    load_deployment,
    split_relay,
)
from servekit.errors import UsageError
from servekit.vocabulary import check_url

PAGE = """# HELP vllm:num_requests_running Number of requests running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",engine_role="prefill",engine_url="http://10.0.0.1:7100",model_name="m"} 1.0
vllm:num_requests_running{engine="0",engine_role="decode",engine_url="http://10.0.0.2:7100",model_name="m"} 2.0
# HELP vllm:prefix_cache_hits_total Hits.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",engine_role="prefill",engine_url="http://10.0.0.1:7100",model_name="m"} 128.0
vllm:prefix_cache_hits_total{engine="0",engine_role="decode",engine_url="http://10.0.0.2:7100",model_name="m"} 0.0
# HELP servekit_proxy_engine_scrape_ok 1 when read
# TYPE servekit_proxy_engine_scrape_ok gauge
servekit_proxy_engine_scrape_ok{engine_role="prefill",engine_url="http://10.0.0.1:7100"} 1.0
servekit_proxy_engine_scrape_ok{engine_role="decode",engine_url="http://10.0.0.2:7100"} 1.0
"""


def _values(text: str) -> dict[str, float]:
    return {
        s.name: s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if not s.name.startswith("servekit_")
    }


def test_a_relay_page_splits_into_one_parseable_page_per_engine() -> None:
    parts = split_relay(PAGE)
    assert set(parts) == {"http://10.0.0.1:7100", "http://10.0.0.2:7100"}
    assert _values(parts["http://10.0.0.1:7100"]) == {
        "vllm:num_requests_running": 1.0,
        "vllm:prefix_cache_hits_total": 128.0,
    }
    assert _values(parts["http://10.0.0.2:7100"])["vllm:num_requests_running"] == 2.0


@given(st.lists(st.integers(min_value=1, max_value=65535), min_size=1, max_size=8, unique=True))
def test_every_engine_keeps_exactly_its_own_samples(ports: list[int]) -> None:
    lines = ["# TYPE vllm:x gauge"]
    lines += [f'vllm:x{{engine_url="http://h:{p}"}} {p}.0' for p in ports]
    parts = split_relay("\n".join(lines) + "\n")
    assert {url: _values(text) for url, text in parts.items()} == {
        f"http://h:{p}": {"vllm:x": float(p)} for p in ports
    }


def test_metrics_come_from_the_engine_or_from_the_relay() -> None:
    ep = Endpoint(name="d0", role="decode", url="http://10.0.0.2:7100")
    direct = Deployment(entry_url="http://10.0.0.1:8080", endpoints=(ep,))
    assert direct.metrics_source(ep) == ("http://10.0.0.2:7100/metrics", None)
    relay = direct.model_copy(
        update={"engine_access": "relay", "metrics_relay": "http://10.0.0.1:8080/metrics/engines"}
    )
    assert relay.metrics_source(ep) == ("http://10.0.0.1:8080/metrics/engines", ep.url)
    assert not relay.direct


def test_process_logs_win_over_endpoint_logs(tmp_path: Path) -> None:
    ep = Endpoint(name="d0", role="decode", url="http://h:1", log=tmp_path / "x.log")
    dep = Deployment(entry_url="http://h:1", endpoints=(ep,))
    assert dep.log_files() == {"d0": tmp_path / "x.log"}
    more = dep.model_copy(update={"process_logs": {"d0": tmp_path / "d0.log"}})
    assert more.log_files() == {"d0": tmp_path / "d0.log"}


def test_target_file_reads_a_deployment(tmp_path: Path) -> None:
    dep = Deployment(layout="a3/1p1d", entry_url="http://10.0.0.1:8080")
    path = tmp_path / "deployment.json"
    path.write_text(dep.model_dump_json())
    assert load_deployment(str(path)) == dep


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ('{"entry_url": 3}', "field entry_url"),
        ("not json", "is not a deployment.json"),
        (b"\xff\xfe", "cannot read"),
    ],
)
def test_a_bad_deployment_file_is_one_line(tmp_path: Path, content: str | bytes, says: str) -> None:
    path = tmp_path / "deployment.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(UsageError) as err:
        load_deployment(str(path))
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_missing_deployment_file_says_how_to_write_one(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="servekit deployment"):
        load_deployment(str(tmp_path / "nope.json"))


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://x:99999", "Port out of range"),
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://", "give http://HOST:PORT"),
        ("http://h:0", "root URL"),
        ("http://h:8000/?a=1", "root URL"),
        ("http://h:8000/#top", "root URL"),
        ("http://h:8000/\n", "root URL"),
    ],
)
def test_a_bad_target_url_is_one_line_before_anything_runs(url: str, says: str) -> None:
    with pytest.raises(UsageError, match=re.escape(says)):
        load_deployment(url)


@pytest.mark.parametrize(
    "url",
    ["http://10.0.0.1:8080", "https://proxy.example:443/", "http://[fd00::2]:8000", "http://h"],
)
def test_a_good_target_url_is_kept_without_its_slash(url: str) -> None:
    assert load_deployment(url).entry_url == url.rstrip("/")


@given(st.text(max_size=40))
def test_any_text_after_the_scheme_is_a_url_or_one_usage_error(tail: str) -> None:
    try:
        got = check_url("http://" + tail)
    except UsageError as exc:
        assert str(exc).startswith("--target ") and "\n" not in str(exc)
    else:
        assert got.startswith("http://") and not got.endswith("/")


HOSTILE_URLS = [
    ("http://user:secret@h:8000", "drop the user:password@ part"),
    ("http://user@h:8000", "drop the user:password@ part"),
    ("http://user:secret@h:99999", "drop the user:password@ part"),
    ("http://h :8000", "no spaces"),
    ("http://h\t:8000", "root URL"),
    ("http://" + "a" * 70_000 + ":8000", "longer than 253 characters"),
    ("http://" + "a." * 127 + "b:8000", "longer than 253 characters"),
    ("http://h:8000/../admin", "no . or .. path segments"),
    ("http://h:8000/v1/./x", "no . or .. path segments"),
    ("http://h:8000/%2e%2E/admin", "no . or .. path segments"),
]


@pytest.mark.parametrize(("url", "says"), HOSTILE_URLS)
def test_urls_that_are_not_a_servers_root_are_one_line(url: str, says: str) -> None:
    with pytest.raises(UsageError, match=re.escape(says)) as err:
        check_url(url)
    assert "\n" not in str(err.value) and "secret" not in str(err.value)
    assert len(str(err.value)) < 400


@pytest.mark.parametrize(
    "url", ["http://h:8000/v1", "http://" + "a" * 253 + ":80", "http://h:8000/a..b/.x"]
)
def test_near_misses_of_those_shapes_are_kept(url: str) -> None:
    """Positive control: a path, a host of exactly 253 characters, dots inside a segment."""
    assert check_url(url) == url


def test_a_deployment_file_with_userinfo_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "deployment.json"
    path.write_text('{"entry_url": "http://admin:hunter2@10.0.0.1:8000"}')
    with pytest.raises(UsageError, match="user:password@") as err:
        load_deployment(str(path))
    assert "hunter2" not in str(err.value)


segment = st.text(alphabet="ab.%2eE", max_size=4)
userinfo = st.sampled_from(["", "u@", "u:p@", ":@"])
host = st.one_of(st.just("h"), st.text(alphabet="ab.", min_size=250, max_size=256))
space = st.sampled_from(["", " ", "\u00a0"])


@given(userinfo, host, space, st.lists(segment, max_size=4))
def test_generated_urls_are_accepted_only_when_clean(
    user: str, name: str, gap: str, segments: list[str]
) -> None:
    path = "".join("/" + s for s in segments)
    url = f"http://{user}{name}{gap}:8000{path}"
    try:
        got = check_url(url)
    except UsageError as exc:
        assert "\n" not in str(exc) and (not user or ":p@" not in str(exc))
        return
    assert not user and not gap and len(name) <= 253
    from urllib.parse import unquote

    assert not {".", ".."} & {unquote(s) for s in got.split("/")[3:]}
    assert "@" not in got
