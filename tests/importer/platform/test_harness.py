"""The fake platform: rank table, fake tools, recording vllm/proxy, node runs under dash."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from servekit.catalog import MAX_NODES
from servekit.importer.platform.harness import (
    RECORDER,
    FakePlatform,
    create_platform,
    fake_nodes,
    rank_table,
    record_facts,
    run_all_nodes,
    run_facts,
    run_node,
    start_node,
    write_rank_table,
)

HERE = Path(__file__).parent
SAMPLE = HERE / "sample_entry.sh"


@pytest.fixture
def platform(tmp_path: Path) -> FakePlatform:
    return create_platform(tmp_path / "platform", 2)


def _tool(platform: FakePlatform, node: int, script: str) -> str:
    """Run a constant ``dash -c`` script with node ``node``'s environment."""
    done = subprocess.run(
        ["dash", "-c", script],
        env=platform.base_env(node),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_rank_table_lists_groups_in_order_with_group_zero_first() -> None:
    nodes = fake_nodes(4)
    doc = rank_table([(n.ip, n.pod) for n in nodes], (1, 3))
    assert doc["status"] == "completed"
    groups = doc["server_group_list"]
    assert [len(g["server_list"]) for g in groups] == [1, 3]
    flat = [s for g in groups for s in g["server_list"]]
    assert [(s["pod_name"], s["server_ip"]) for s in flat] == [
        ("fake-pod-0", "10.88.0.1"),
        ("fake-pod-1", "10.88.0.2"),
        ("fake-pod-2", "10.88.0.3"),
        ("fake-pod-3", "10.88.0.4"),
    ]


def test_fake_nodes_cover_every_node_count_a_layout_may_have() -> None:
    nodes = fake_nodes(MAX_NODES)
    ips = [ipaddress.ip_address(n.ip) for n in nodes]
    assert len(set(ips)) == MAX_NODES and str(ips[0]) == "10.88.0.1"
    assert str(ips[249]) == "10.88.0.250" and str(ips[250]) == "10.88.1.1"
    with pytest.raises(ValueError, match=f"1..{MAX_NODES}"):
        fake_nodes(MAX_NODES + 1)


@pytest.mark.parametrize("sizes", [(1, 2), (3,), (0, 2)])
def test_rank_table_refuses_groups_that_do_not_split_the_nodes(sizes: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="group sizes"):
        rank_table([(n.ip, n.pod) for n in fake_nodes(2)], sizes)


def test_platform_writes_a_real_rank_table_file(platform: FakePlatform) -> None:
    doc = json.loads(platform.rank_table.read_text())
    assert doc["status"] == "completed"
    assert [len(g["server_list"]) for g in doc["server_group_list"]] == [1, 1]


def test_fake_hostname_gives_pod_and_ip(platform: FakePlatform) -> None:
    assert _tool(platform, 1, "hostname") == "fake-pod-1\n"
    assert _tool(platform, 1, "hostname -I | awk '{print $1}'") == "10.88.0.2\n"


def test_fake_ifconfig_resolves_the_nic_holding_the_ip(platform: FakePlatform) -> None:
    script = """ifconfig | awk -v ip="$FAKEPLATFORM_IP" '
        /^[^[:space:]]/ { name = $1; sub(":", "", name) }
        $1 == "inet" && $2 == ip { print name }'"""
    assert _tool(platform, 1, script) == "fakenic1\n"
    assert "inet 127.0.0.1" in _tool(platform, 1, "ifconfig lo")


def test_fake_ip_answers_addr_show_and_route_get(platform: FakePlatform) -> None:
    oneline = _tool(platform, 0, "ip -o -4 addr show")
    assert [line.split()[1] for line in oneline.splitlines()] == ["lo", "fakenic0"]
    assert "inet 10.88.0.1/24" in oneline
    route = _tool(platform, 0, "ip route get 10.0.0.9").split()
    assert route[route.index("dev") + 1] == "fakenic0"
    assert route[route.index("src") + 1] == "10.88.0.1"


def test_recorder_keeps_the_exact_environment_argv_and_cwd(platform: FakePlatform) -> None:
    env = {
        "FAKEPLATFORM_RECORD_DIR": str(platform.record_dir),
        "FAKEPLATFORM_NODE": "1",
        "ODD": "a b\nc=d",
    }
    subprocess.run(
        [str(platform.bin_dir / "vllm"), "serve", "/m", "--x", "{}"],
        env=env,
        cwd=platform.home,
        check=True,
    )
    (record,) = platform.records()
    assert (record.kind, record.node) == ("engine", 1)
    assert record.argv == ("vllm", "serve", "/m", "--x", "{}")
    assert record.env == env
    assert record.cwd == str(platform.home)


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_every_node_runs_its_entry_and_everything_it_starts_is_recorded(
    platform: FakePlatform, shell: str
) -> None:
    runs = run_all_nodes(platform, SAMPLE, shell=shell, timeout=60)
    assert [(r.returncode, r.timed_out) for r in runs] == [(0, False), (0, False)]
    # node 0's proxy starts after its engine exited: the run waited for it
    assert [sorted(p.kind for p in r.records) for r in runs] == [["engine", "proxy"], ["engine"]]
    facts = {f.key: f for r in runs for f in run_facts(platform, r)}
    assert sorted(facts) == ["n0/engine/port7100", "n0/proxy/port8080", "n1/engine/port7101"]
    engine = facts["n1/engine/port7101"]
    assert engine.program == ("vllm", "serve", "/root/model")
    assert engine.cwd == "{PLATFORM}/home/scratch"
    assert engine.env == {
        "GLOO_SOCKET_IFNAME": "{NODE1_NIC}",
        "HCCL_IF_IP": "{NODE1_IP}",
        "LD_LIBRARY_PATH": "/opt/sample/lib:{INHERITED}",
        "SAMPLE_SETTING": "1",
        "http_proxy": None,
    }
    assert engine.flags == (
        ("--port", ("7101",)),
        ("--data-parallel-address", ("{NODE0_IP}",)),
        ("--enforce-eager", ()),
        ("--additional-config", ({"flag": True, "text": "true"},)),
    )
    proxy = facts["n0/proxy/port8080"]
    assert proxy.program == ("python3", "{PROXY_SCRIPT}")
    assert proxy.cwd is None
    assert proxy.flag_values()["--prefiller-hosts"] == [("{NODE0_IP}", "{NODE0_IP}")]


def test_entry_waits_for_the_rank_table_to_complete(tmp_path: Path) -> None:
    platform = create_platform(tmp_path / "p", 1, status="initializing")
    started = start_node(platform, 0, SAMPLE)
    write_rank_table(platform, "completed")
    run = started.wait(timeout=60)
    assert run.returncode == 0
    assert [r.kind for r in run.records] == ["engine", "proxy"]


def test_entry_gives_up_when_the_rank_table_never_completes(tmp_path: Path) -> None:
    platform = create_platform(tmp_path / "p", 1, status="initializing")
    run = run_node(platform, 0, SAMPLE, extra_env={"RANK_TABLE_TIMEOUT": "1"}, timeout=60)
    assert run.returncode == 1
    assert "rank table not completed" in run.stderr
    assert run.records == []


def test_extra_env_counts_as_inherited_not_as_set_by_the_entry(platform: FakePlatform) -> None:
    run = run_node(platform, 1, SAMPLE, extra_env={"FROM_OUTSIDE": "x"}, timeout=60)
    (record,) = run.records
    assert record.env["FROM_OUTSIDE"] == "x"
    assert "FROM_OUTSIDE" not in run_facts(platform, run)[0].env
    assert "FROM_OUTSIDE" in record_facts(platform, record).env


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_recorded_vllm_can_stay_alive_until_sigterm(platform: FakePlatform) -> None:
    node = start_node(platform, 1, SAMPLE, extra_env={"FAKEPLATFORM_STAY": "1"})
    deadline = time.monotonic() + 60
    while not platform.records(1) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert platform.records(1), "the engine never recorded itself"
    assert node.popen.poll() is None
    node.terminate()
    run = node.wait(timeout=60)
    assert run.returncode == 128 + 15
    assert [e["signal"] for e in platform.exits()] == [15]
    assert _group_gone(node.popen.pid)


def test_recorded_vllm_fails_on_the_chosen_port(platform: FakePlatform) -> None:
    run = run_node(platform, 1, SAMPLE, extra_env={"FAKEPLATFORM_FAIL_PORT": "7101"}, timeout=60)
    assert run.returncode == 3
    assert len(run.records) == 1


@pytest.mark.slow
def test_a_node_past_its_timeout_is_killed_with_everything_it_started(
    platform: FakePlatform, tmp_path: Path
) -> None:
    entry = tmp_path / "hang.sh"
    entry.write_text("sleep 60 &\nsleep 60\n")
    node = start_node(platform, 0, entry)
    run = node.wait(timeout=0.5)
    assert run.timed_out
    assert run.returncode is None
    assert _group_gone(node.popen.pid)


@pytest.mark.tools
def test_shell_of_the_kit_is_shellcheck_clean() -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "Debian's shellcheck is required (scripts/bootstrap.sh tools installs it)"
    bin_dir = RECORDER.parent / "bin"
    scripts = [str(p) for p in sorted(bin_dir.iterdir())] + [str(SAMPLE)]
    done = subprocess.run(
        [shellcheck, "-s", "sh", *scripts], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout
