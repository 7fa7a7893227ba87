"""``servekit preflight`` and the plain nodes' ``preflight.sh``, as users run them.

The command shows what each node is checked for, runs one node's preflight here
(exchanging with the others as the rendered entries do) and reports a folder of
results; bad input is one line and exit 2. ``node<i>/preflight.sh`` (``render
--target nodes``) is run on both nodes of an A2 layout at once under sh, with
the stand-in fabric: exit 0 healthy, 1 with the failing node named.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tests.helpers.cli import servekit_inproc
from tests.preflight.helpers import fabric_for, plan_of

from servekit.platforms import Faults, write_rendering
from servekit.platforms.fake import loopback_block
from servekit.render import build_plan

A2 = "a2/deepseekv4-flash/2nodes"


def test_the_command_shows_each_nodes_checks() -> None:
    done = servekit_inproc("preflight", "a3/deepseekv4-flash/2p2d", env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert (
        "4 nodes, a3, results exchanged on port 18900, reserved ports [20000, 36000)" in done.stdout
    )
    node2 = next(line for line in done.stdout.splitlines() if "node 2" in line)
    assert "7100-7115, 12321, 36100-36115" in node2 and "node0 (KV prefill0 -> decode0)" in node2


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--node", "0"], "--node: give --addresses IP,IP,... or --shared FOLDER"),
        (
            ["--node", "4", "--addresses", "a,b"],
            "--node 4: a2/deepseekv4-flash/2nodes has nodes 0-1",
        ),
        (["--node", "0", "--addresses", "10.0.0.1"], "--addresses: 1 given"),
        (["--node", "0", "--report", "x"], "--node and --report: give one"),
        (["--report", "/servekit/no/such/folder"], "--report /servekit/no/such/folder: no such"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], said: str) -> None:
    done = servekit_inproc("preflight", A2, *args, env={"COLUMNS": "200"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr and done.stderr.count("\n") == 1, done.stderr


def _nodes(tmp_path: Path, faults: Faults) -> tuple[list[subprocess.Popen[str]], Path]:
    """Both nodes' rendered ``preflight.sh`` started at once, each as its node."""
    out = tmp_path / "rendered"
    write_rendering(build_plan(plan_of(A2)), out, "nodes")
    fabric = fabric_for(A2, tmp_path / "npu", faults)
    logs = tmp_path / "logs"
    return [
        subprocess.Popen(
            ["sh", str(out / f"node{i}" / "preflight.sh")],
            env={
                "PATH": os.environ["PATH"],
                "NODE0_IP": ADDRESSES[0],
                "NODE1_IP": ADDRESSES[1],
                "BIND_HOST": ADDRESSES[i],
                "LOG_DIR": str(logs),
                "PREFLIGHT_TIMEOUT": "60",
                **fabric.add(i),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ], logs


ADDRESSES: list[str] = []


@pytest.fixture(autouse=True)
def _addresses() -> object:
    """Two loopback addresses of a block no other dry run holds."""
    with loopback_block(lambda prefix: True, "two addresses") as prefix:
        ADDRESSES[:] = [f"{prefix}.2", f"{prefix}.3"]
        yield
    ADDRESSES.clear()


@pytest.mark.slow
@pytest.mark.parametrize("healthy", [True, False])
def test_plain_nodes_run_their_preflight_sh_together(healthy: bool, tmp_path: Path) -> None:
    faults = Faults() if healthy else Faults(busy={1: (2,)})
    running, logs = _nodes(tmp_path, faults)
    outputs = [p.communicate(timeout=120)[0] for p in running]
    codes = [p.returncode for p in running]
    assert codes == ([0, 0] if healthy else [1, 1]), outputs
    last = [o.strip().splitlines()[-1] for o in outputs]
    if healthy:
        assert all(line.endswith("preflight passed on 2 units of " + A2) for line in last)
    else:
        assert all(
            f"preflight FAILED: node 1 ({ADDRESSES[1]}): busy: NPU 2 is busy" in x for x in last
        )
    folder = logs / "preflight" / "a2__deepseekv4-flash__2nodes"
    report = servekit_inproc("preflight", A2, "--report", str(folder), "--json")
    assert report.returncode == (0 if healthy else 1), report.stderr
    doc = json.loads(report.stdout)
    assert [u["label"] for u in doc["units"]] == ["node 0", "node 1"]
    assert doc["verdict"] == ("ok" if healthy else "fail")
