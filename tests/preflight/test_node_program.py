"""The node-side program as shipped: Python 3.8, standard library, and its parsers.

The rendered entries run ``servekit_preflight.py`` (with ``_probe`` and ``_share``
beside it) under the engine image's python3, where servekit is not installed:
each file must be servekit's own bytes, read as Python 3.8, import only the
standard library, and turn any tool output, spec or peer document into a value
or a refusal, never a crash (hypothesis tries the shapes).
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from tests.preflight.helpers import fabric_for, plan_of

from servekit.platforms import render_files
from servekit.preflight import checker_files, preflight_files
from servekit.preflight.node import (
    servekit_preflight as entry,
    servekit_preflight_probe as probe,
    servekit_preflight_share as share,
)
from servekit.render import build_plan

HERE = Path(entry.__file__).parent
STDLIB = set(sys.stdlib_module_names) | {"__future__"}
NEWER_THAN_38 = ("removeprefix", "removesuffix", "functools.cache", "zoneinfo", "tomllib")


def _python38() -> str | None:
    """A Python 3.8 that runs, where this machine has one (PATH, then pyenv's versions)."""
    found = [
        shutil.which("python3.8"),
        *map(str, Path.home().glob(".pyenv/versions/3.8*/bin/python3.8")),
    ]
    for candidate in filter(None, found):
        ran = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True, check=False)  # fmt: skip
        if ran.returncode == 0 and ran.stdout.strip() == "(3, 8)":
            return candidate
    return None


PY38 = _python38()


def test_every_target_ships_servekits_own_files() -> None:
    plan = build_plan(plan_of("a3/deepseekv4-flash/1p1d"))
    shipped = checker_files()
    assert sorted(shipped) == sorted(entry.FILES)
    for name, data in shipped.items():
        assert data == (HERE / name).read_bytes(), name
    for target, prefix in (("modelarts", ""), ("nodes", "node1/")):
        files = render_files(plan, target)
        assert all(files[prefix + name] == data for name, data in shipped.items())
        assert "servekit_preflight.json" in {k.rsplit("/", 1)[-1] for k in files}
    assert not any("preflight" in k for k in render_files(plan, "modelarts", preflight=False))


@pytest.mark.parametrize("name", entry.FILES)
def test_each_file_reads_as_python_3_8_and_imports_the_standard_library_only(name: str) -> None:
    text = (HERE / name).read_text()
    tree = ast.parse(text, feature_version=(3, 8))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
    siblings = {f.removesuffix(".py") for f in entry.FILES}
    assert imported <= STDLIB | siblings, imported - STDLIB - siblings
    assert not [word for word in NEWER_THAN_38 if word in text]
    # no subscripted builtin evaluated at run time (dict[...] needs 3.9): annotations and
    # `if TYPE_CHECKING:` only
    hidden = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript):
            base = node.value.value
            assert not (isinstance(base, ast.Name) and base.id in ("dict", "list", "tuple"))


@pytest.mark.skipif(PY38 is None, reason="no Python 3.8 on this machine")
def test_a_python_3_8_runs_the_shipped_files(tmp_path: Path) -> None:
    """The positive proof where a 3.8 interpreter exists (the AST check runs everywhere):
    one node's whole local check on a fake A2 node, and the report of an empty folder."""
    name = "a2/deepseekv4-flash/2nodes"
    for file, data in preflight_files(build_plan(plan_of(name))).items():
        (tmp_path / file).write_bytes(data if isinstance(data, bytes) else data.encode())
    env = {"PATH": os.environ["PATH"], **fabric_for(name, tmp_path / "npu").add(1)}
    entry_file, spec = tmp_path / "servekit_preflight.py", tmp_path / "servekit_preflight.json"
    assert PY38 is not None
    local = [
        PY38,
        str(entry_file),
        "local",
        str(spec),
        "--unit",
        "node1",
        "--bind-ports",
        "127.0.0.1",
    ]
    done = subprocess.run(local, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    checks = {c["check"]: c["level"] for c in json.loads(done.stdout)["checks"]}
    assert checks["link"] == checks["busy"] == checks["ports"] == checks["model"] == "ok"
    (tmp_path / "empty").mkdir()
    report = [PY38, str(entry_file), "report", str(tmp_path / "empty")]
    done = subprocess.run(report, capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "holds no preflight results" in done.stderr, done.stderr


# ------------------------------------------------------------- documented formats


def test_the_guides_and_manuals_formats_are_read() -> None:
    assert probe.parse_link("link status: UP\n") == "UP"
    assert probe.parse_link("link status: DOWN") == "DOWN"
    assert probe.parse_net_health("net health status: Success\n") == "Success"
    assert probe.parse_net_health("net health status: Init") == "Init"
    tls = (
        "dev_id:0, tls switch[0](0:disable, 1:enable), tls preconfigured[1](0:non-preset, "
        "1:preset), tls alarm time threshold[60]days"
    )
    assert probe.parse_tls_switch(tls) == 0
    assert probe.parse_ipaddr("ipaddr:10.20.0.10 netmask:255.255.255.0") == "10.20.0.10"
    assert probe.parse_netmask("ipaddr:10.20.0.10 netmask:255.255.255.0") == "255.255.255.0"
    assert probe.parse_detect("netdetect address: 10.20.0.254") == "10.20.0.254"
    assert probe.parse_any_ip("default gateway:10.20.0.254, ifname: eth0") == "10.20.0.254"
    assert probe.parse_ifname("Port ID TLV\n\tIfname: 400GE1/0/3\n") == "400GE1/0/3"
    assert probe.parse_spod("SDID : 8388608\nSuper Pod ID : 3\n") == (3, 8388608)
    assert probe.parse_spod("| Super Pod ID   : 3   | Pod ID : 1 |") == (3, None)
    assert probe.parse_spod("This device does not support querying spod-info.") == (None, None)
    assert probe.parse_ping(0, "This pkt ping success")
    assert not probe.parse_ping(1, "This pkt ping fail")
    assert not probe.parse_ping(0, "recv timeout")
    assert probe.parse_hccn_conf("# c\naddress_0=10.0.0.1\nnetmask_0=255.255.255.0\nnoise") == {
        "address_0": "10.0.0.1",
        "netmask_0": "255.255.255.0",
    }


A3_TABLE = """\
| 0     Ascend910           | OK            | 180.2       38                0    / 0             |
| 0     0                   | 0000:9D:00.0  | 0           0    / 0          3430 / 65536         |
+------------------------------------------------------------------------------------------------+
| 0     Ascend910           | Warning       | -           37                0    / 0             |
| 1     1                   | 0000:9F:00.0  | 0           0    / 0          3188 / 65536         |
+===========================+===============+====================================================+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| No running processes found in NPU 0                                                            |
| 1       1                 | 3330598       | python3                  | 50117                   |
"""


def test_npu_smi_info_health_and_processes_by_device() -> None:
    health, procs = probe.parse_npu_smi(A3_TABLE, 2)
    assert health == {0: "OK", 1: "Warning"}
    assert procs == {3: [(3330598, "python3", 50117)]}  # NPU 1 chip 1 = device 3
    a2 = "| 2 910B3 | OK | 95.4 |\n| 0 | 0000:42:00.0 | 0 |\n| 2       0 | 77 | vllm | 10 |\n"
    assert probe.parse_npu_smi(a2, 1) == ({2: "OK"}, {2: [(77, "vllm", 10)]})
    # newer drivers add "Process id in container" (vllm-ascend issue 12980)
    five = "| 0       0                 | 632268        | python3.1          | 197      | NA  |\n"
    assert probe.parse_npu_smi(five, 2)[1] == {0: [(632268, "python3.1", 197)]}


PARSERS = (
    probe.parse_link,
    probe.parse_net_health,
    probe.parse_tls_switch,
    probe.parse_ipaddr,
    probe.parse_netmask,
    probe.parse_detect,
    probe.parse_any_ip,
    probe.parse_ifname,
    probe.parse_spod,
    probe.parse_driver_version,
    probe.parse_hccn_conf,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=2000))
def test_no_tool_output_crashes_a_parser(text: str) -> None:
    for parse in PARSERS:
        parse(text)
    health, procs = probe.parse_npu_smi(text, 2)
    assert all(isinstance(d, int) for d in (*health, *procs))
    assert isinstance(probe.parse_ping(0, text), bool)
    found = probe.parse_ipaddr(text)
    assert found is None or probe.is_ip(found)


# ------------------------------------------------------------- spec and documents


def _spec_bytes(**change: object) -> bytes:
    doc = {
        "schema": entry.SPEC_SCHEMA,
        "layout": "x/y",
        "platform": "a2",
        "port": 18900,
        "units": [{"name": "node0", "devices": [0], "ports": [[7100, "api"]], "peers": []}],
    }
    doc.update(change)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"schema": "other"}, "not a servekit.preflight/1"),
        ({"units": []}, "lists no units"),
        ({"port": 0}, "port is not a whole number"),
        ({"units": [{"name": "../x"}]}, "is not a unit name"),
        ({"units": [{"name": "a"}, {"name": "a"}]}, "two units share a name"),
        ({"units": [{"name": "a", "devices": "0-7"}]}, "are lists"),
    ],
)
def test_a_spec_that_is_not_one_is_refused_with_the_reason(
    change: dict[str, object], why: str
) -> None:
    with pytest.raises(entry.SpecError, match=why):
        entry.parse_spec(_spec_bytes(**change))


@settings(max_examples=100, deadline=None)
@given(
    data=st.one_of(
        st.binary(max_size=400),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=20),
            lambda inner: (
                st.lists(inner, max_size=4)
                | st.dictionaries(st.text(max_size=8), inner, max_size=4)
            ),
            max_leaves=30,
        ).map(lambda v: json.dumps(v).encode()),
    )
)
def test_hostile_specs_and_peer_documents_never_crash(data: bytes) -> None:
    with contextlib.suppress(entry.SpecError):
        entry.parse_spec(data)
    doc = share.read_doc(data, "node0", "final")
    assert doc is None or doc["unit"] == "node0"


def test_a_peer_document_is_cleaned_before_it_is_printed() -> None:
    raw = {
        "schema": share.NODE_SCHEMA,
        "unit": "node1",
        "phase": "final",
        "label": "node 1\x1b[31m\nFAKE LINE",
        "checks": [{"check": "link", "level": "bogus", "detail": "x" * 5000 + "\n"}],
        "facts": {},
        "started": "never",
    }
    doc = share.read_doc(json.dumps(raw).encode(), "node1", "final")
    assert doc is not None
    assert "\n" not in doc["label"] and "\x1b" not in doc["label"]
    assert doc["checks"][0]["level"] == "fail"  # an unknown level counts against it
    assert len(doc["checks"][0]["detail"]) <= probe.MAX_TEXT
    assert doc["started"] == 0.0
    assert share.read_doc(json.dumps(raw).encode(), "node2", "final") is None  # not its unit
    assert share.read_doc(b"{" * (share.MAX_DOC_BYTES + 1), "node1", "final") is None
