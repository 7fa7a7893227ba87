"""The rank-table reader as a module: each refusal's line and status, the output, fuzzing.

test_rank_table_fuzz.py runs the shipped file as the entry does (a subprocess on
hostile files); these call it in-process, so every message it has is pinned by
name and hypothesis can try many more shapes cheaply.
"""

from __future__ import annotations

import ast
import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from servekit.platforms.modelarts import ranktable
from servekit.platforms.modelarts.scripts import RANK_TABLE_FILE, entry_files


def _call(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = ranktable.main(list(argv))
    return status, out.getvalue(), err.getvalue()


def _table(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "global_rank_table.json"
    path.write_text(json.dumps(doc))
    return path


def _servers(*entries: Any) -> dict[str, Any]:
    return {"status": "completed", "server_group_list": [{"server_list": list(entries)}]}


def test_the_shipped_file_is_this_module_and_reads_as_python_3_8() -> None:
    data = entry_files()[RANK_TABLE_FILE]
    assert data == Path(ranktable.__file__).read_bytes()
    ast.parse(data, feature_version=(3, 8))
    imports = {
        alias.name.split(".")[0]
        for node in ast.walk(ast.parse(data))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }
    assert imports <= {
        "__future__",
        "ipaddress",
        "json",
        "os",
        "re",
        "sys",
        "collections",
        "typing",
    }


def test_status_and_servers_print_plain_lines(tmp_path: Path) -> None:
    doc = {
        "status": "completed",
        "server_group_list": [
            {"server_list": [{"server_ip": "10.0.0.1", "pod_name": "p0"}]},
            {"server_list": [{"server_ip": "fe80::1%eth0"}, {"server_ip": "10.0.0.3"}]},
        ],
    }
    path = _table(tmp_path, doc)
    assert _call("status", str(path)) == (0, "completed\n", "")
    assert _call("servers", str(path), "", "10.0.0.3") == (
        0,
        "3\n2\n1\n10.0.0.1 fe80::1%eth0 10.0.0.3\np0 - -\n",
        "",
    )
    # The pod name wins over the address.
    assert _call("servers", str(path), "p0", "10.0.0.3")[1].split("\n")[1] == "0"


def test_status_is_one_short_line(tmp_path: Path) -> None:
    path = _table(tmp_path, {"status": "a\nb" + "x" * 100})
    status, out, _ = _call("status", str(path))
    assert status == 0 and out == "a b" + "x" * 61 + "\n"


REFUSALS: list[tuple[Any, int, str]] = [
    ([1], 3, "the rank table is not a JSON object"),
    ({"server_group_list": "x"}, 1, "server_group_list is not a list"),
    ({"server_group_list": [None, {"server_list": "x"}]}, 1, "the rank table lists no servers"),
    (_servers(7), 1, "server 0 is not an object"),
    (_servers({"server_ip": "10.0.0.1"}, {"server_ip": "x"}), 1, "server 1: server_ip is not an IP address"),
    (_servers({"server_ip": "10.0.0.1%eth0"}), 1, "server 0: server_ip has a scope id that is not an interface name"),
    (_servers({"server_ip": "fe80::1%a b"}), 1, "server 0: server_ip has a scope id that is not an interface name"),
    (_servers({"server_ip": "10.0.0.1", "pod_name": "$(id)"}), 1, "server 0: pod_name has characters a pod name cannot have"),
    (_servers({"server_ip": "10.0.0.9", "pod_name": "p9"}), 1, "this node (pod p0, address 10.0.0.1) is not in the rank table; set NODE_POD_NAME"),
]  # fmt: skip


@pytest.mark.parametrize(("doc", "want_status", "line"), REFUSALS)
def test_each_refusal_is_one_line_with_its_status(
    tmp_path: Path, doc: Any, want_status: int, line: str
) -> None:
    status, out, err = _call("servers", str(_table(tmp_path, doc)), "p0", "10.0.0.1")
    assert (status, out, err) == (want_status, "", line + "\n")


def test_unknown_node_names_the_fix_even_without_pod_or_address(tmp_path: Path) -> None:
    path = _table(tmp_path, _servers({"server_ip": "10.0.0.9"}))
    assert _call("servers", str(path), "", "")[2] == (
        "this node (pod ?, address ?) is not in the rank table; set NODE_POD_NAME\n"
    )


@pytest.mark.parametrize(
    ("content", "want_status", "line"),
    [
        (b"\xff\xfe{", 3, "the rank table is not readable JSON (UnicodeDecodeError)"),
        (b"[" * 100_000, 3, "the rank table is not readable JSON (RecursionError)"),
        (b'{"a": 1', 1, "the rank table is not readable JSON (JSONDecodeError)"),
        (b"{\x00}", 3, "the rank table is not readable JSON (NUL bytes: UTF-16?); the platform writes UTF-8"),
    ],
)  # fmt: skip
def test_files_that_are_not_json_objects(
    tmp_path: Path, content: bytes, want_status: int, line: str
) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(content)
    assert _call("status", str(path)) == (want_status, "", line + "\n")


def test_a_missing_file_is_not_readable_yet(tmp_path: Path) -> None:
    assert _call("status", str(tmp_path / "absent")) == (
        1,
        "",
        "the rank table is not readable (FileNotFoundError)\n",
    )


def test_a_file_too_large_is_refused_for_good(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ranktable, "MAX_BYTES", 4)
    path = _table(tmp_path, {"status": "completed"})
    assert _call("status", str(path)) == (3, "", "the rank table is larger than 16 MiB\n")


@pytest.mark.parametrize(
    "argv", [(), ("status",), ("servers", "t", "p"), ("other", "t"), ("status", "t", "x")]
)
def test_a_wrong_command_line_is_a_usage_line(argv: tuple[str, ...]) -> None:
    assert _call(*argv) == (2, "", ranktable.USAGE + "\n")


json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=20,
)
server = st.one_of(
    st.fixed_dictionaries(
        {"server_ip": st.one_of(st.ip_addresses().map(str), json_value),
         "pod_name": st.one_of(st.from_regex(r"[a-z0-9-]{1,8}", fullmatch=True), json_value)}
    ),
    json_value,
)  # fmt: skip
doc = st.one_of(
    json_value,
    st.fixed_dictionaries(
        {"status": json_value,
         "server_group_list": st.one_of(
             st.lists(st.one_of(st.fixed_dictionaries({"server_list": st.lists(server, max_size=4)}), json_value), max_size=3),
             json_value)}
    ),
)  # fmt: skip


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(doc=doc, me_pod=st.text(max_size=8), me_ip=st.text(max_size=12))
def test_any_json_shape_gives_lines_or_one_refusal(
    tmp_path: Path, doc: Any, me_pod: str, me_ip: str
) -> None:
    """Bounded in depth and size: never an exception, and output the shell can split."""
    path = _table(tmp_path, doc)
    for argv in (("status", str(path)), ("servers", str(path), me_pod, me_ip)):
        status, out, err = _call(*argv)
        assert status in (0, 1, 3)
        if status:
            assert out == "" and err.endswith("\n") and "\n" not in err[:-1]
        else:
            assert err == "" and out.count("\n") == (1 if argv[0] == "status" else 5)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=512))
def test_any_bytes_give_one_line(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(data)
    status, out, err = _call("servers", str(path), "p0", "10.0.0.1")
    assert status in (0, 1, 3)
    assert (out.count("\n"), err) == (5, "") if status == 0 else (out, err.count("\n")) == ("", 1)
