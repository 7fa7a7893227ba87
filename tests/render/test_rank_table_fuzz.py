"""The rank-table reader the rendered run.sh runs, fuzzed: any file gives a line, never a run.

The platform writes ``global_rank_table.json``; the rendered entry reads it with
``python3 servekit_rank_table.py`` (shipped beside it) whose output the shell then
uses. That program is what parses hostile input on the real cluster, so it is
taken from a real rendering and run on generated files: any JSON shape, wrong types,
hostile strings, deep nesting, bytes that are not UTF-8, IPv6 scope ids. Each run
must end with exit 0, 1 (a one-line reason: not readable yet, or not usable) or 3
(one line: a file that can never be read), never a traceback and never a hang, and
whatever it prints for the shell must be plain: counts, IP addresses, pod names.
"""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from servekit.catalog.loader import load
from servekit.platforms import render_files
from servekit.platforms.modelarts.scripts import RANK_TABLE_FILE
from servekit.render.plan import build_plan

SCOPE = re.compile(r"[A-Za-z0-9_.-]{1,15}")
POD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}|-")
HOSTILE = ["$(touch /tmp/pwned)", "`id`", "a b", "x\ny", "10.0.0.1; id", "'", '"', "\x00", ""]


@pytest.fixture(scope="module")
def rank_py(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The reader as a real rendering ships it, beside the run.sh that runs it."""
    files = render_files(build_plan(load("a3/1p1d").layout), "modelarts")
    run_sh = files["run.sh"]
    assert isinstance(run_sh, str)
    assert f'RANK_PY="$here/{RANK_TABLE_FILE}"' in run_sh, "run.sh no longer runs the reader"
    path = tmp_path_factory.mktemp("reader") / RANK_TABLE_FILE
    content = files[RANK_TABLE_FILE]
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


def _read(rank_py: str, path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, rank_py, *args[:1], str(path), *args[1:]],
        capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip


def _check(run: subprocess.CompletedProcess[str]) -> None:
    assert run.returncode in (0, 1, 3), (run.returncode, run.stderr[-500:])
    assert "Traceback" not in run.stderr, run.stderr[-2000:]
    if run.returncode in (1, 3):
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
        return
    nnodes, rank, group0, addrs, pods = run.stdout.split("\n")[:5]
    assert nnodes.isdigit() and rank.isdigit() and group0.isdigit()
    for addr in addrs.split(" "):
        plain, pct, scope = addr.partition("%")
        assert str(ipaddress.ip_address(plain)) == plain
        assert not pct or (SCOPE.fullmatch(scope) and ":" in plain), addr
    for pod in pods.split(" "):
        assert POD.fullmatch(pod), pod


ip = st.one_of(
    st.ip_addresses().map(str),
    st.sampled_from(HOSTILE),
    st.text(max_size=20),
    st.integers(),
    st.none(),
    st.lists(st.integers(), max_size=2),
)
pod = st.one_of(st.from_regex(r"[a-z0-9][a-z0-9-]{0,12}", fullmatch=True), st.sampled_from(HOSTILE),
                st.text(max_size=20), st.none(), st.integers())  # fmt: skip
server = st.one_of(
    st.fixed_dictionaries({"server_ip": ip, "pod_name": pod}), st.integers(), st.text()
)
group = st.one_of(st.fixed_dictionaries({"server_list": st.lists(server, max_size=3)}), st.none(),
                  st.fixed_dictionaries({"server_list": st.text(max_size=5)}))  # fmt: skip
table = st.one_of(
    st.fixed_dictionaries(
        {
            "status": st.one_of(st.just("completed"), st.text(max_size=10), st.integers()),
            "server_group_list": st.one_of(st.lists(group, max_size=3), st.text(max_size=5)),
        }
    ),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
        max_leaves=10,
    ),
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=table, me_pod=st.one_of(st.just(""), pod.filter(lambda p: isinstance(p, str))))
def test_any_json_gives_plain_output_or_one_line(
    rank_py: str, tmp_path_factory: pytest.TempPathFactory, doc: object, me_pod: str
) -> None:
    path = tmp_path_factory.mktemp("rank") / "global_rank_table.json"
    path.write_text(json.dumps(doc))
    _check(_read(rank_py, path, "servers", me_pod.replace("\x00", ""), "10.0.0.1"))
    status = _read(rank_py, path, "status")
    _check_status(status)


def _check_status(run: subprocess.CompletedProcess[str]) -> None:
    assert run.returncode in (0, 1, 3) and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert "\n" not in run.stdout.rstrip("\n")


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=200))
def test_any_bytes_give_one_line(
    rank_py: str, tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.mktemp("rank") / "global_rank_table.json"
    path.write_bytes(data)
    _check(_read(rank_py, path, "servers", "pod-0", "10.0.0.1"))
    _check_status(_read(rank_py, path, "status"))


@pytest.mark.parametrize(
    "content",
    [
        b"[" * 200_000 + b"]" * 200_000,
        b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        b"\xff\xfe{\x00}\x00",
        json.dumps(
            {
                "status": "completed",
                "server_group_list": [
                    {"server_list": [{"server_ip": "10.0.0.1", "pod_name": "p0"}]}
                ],
            }
        ).encode("utf-16"),
    ],
    # named: a 400 kB id lands in PYTEST_CURRENT_TEST, and the reader's exec then
    # fails with E2BIG (one environment string over 128 KiB) before it runs
    ids=["lists-200k-deep", "objects-100k-deep", "utf16-bytes", "utf16-rank-table"],
)
def test_deep_or_foreign_files_give_one_line(rank_py: str, tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "global_rank_table.json"
    path.write_bytes(content)
    run = _read(rank_py, path, "servers", "p0", "10.0.0.1")
    _check(run)
    assert run.returncode == 3 and "not readable JSON" in run.stderr
    _check_status(_read(rank_py, path, "status"))


def test_a_missing_file_gives_one_line(rank_py: str, tmp_path: Path) -> None:
    run = _read(rank_py, tmp_path / "absent.json", "servers", "p0", "10.0.0.1")
    _check(run)
    assert run.returncode == 1


scope = st.one_of(
    st.from_regex(r"[A-Za-z0-9_.-]{1,15}", fullmatch=True),
    st.text(max_size=20),
    st.sampled_from(["$(touch${IFS}x)", "`id`", "a b", "x\ny", "x 6.6.6.6", "", "a" * 16]),
)


@settings(max_examples=60, deadline=None)
@given(base=st.sampled_from(["fe80::1", "::1", "2001:db8::7", "10.0.0.2"]), scope_id=scope)
def test_scope_ids_pass_only_as_interface_names(
    rank_py: str, tmp_path_factory: pytest.TempPathFactory, base: str, scope_id: str
) -> None:
    """Accepted iff the address is IPv6 and the scope id has an interface name's shape;
    either way the shell gets plain words (one address per node, no phantom node)."""
    path = tmp_path_factory.mktemp("rank") / "global_rank_table.json"
    servers = [{"server_ip": "10.0.0.1", "pod_name": "p0"},
               {"server_ip": f"{base}%{scope_id}", "pod_name": "p1"}]  # fmt: skip
    doc = {"status": "completed", "server_group_list": [{"server_list": servers}]}
    path.write_text(json.dumps(doc))
    run = _read(rank_py, path, "servers", "p0", "10.0.0.1")
    _check(run)
    ok = ":" in base and SCOPE.fullmatch(scope_id) is not None
    assert (run.returncode == 0) == ok, (base, scope_id, run.stderr)
    if ok:
        assert run.stdout.split("\n")[3].split(" ") == ["10.0.0.1", f"{base}%{scope_id}"]
