"""The rendered run.sh against hostile rank tables and settings, under dash on the fake platform.

IPv6 scope ids that carry shell text or spaces, tables that can never be read
(UTF-16, 17 MB, nested past Python's limit), timeouts with a unit, and a stop
while waiting: each is one line and a non-zero exit, nothing run, nothing left
in ``$TMPDIR``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers.waiting import wait_for_text

from servekit.catalog.loader import load
from servekit.importer.platform.harness import create_platform, run_node, start_node
from servekit.platforms import write_rendering
from servekit.render.plan import build_plan


def render(name: str, tmp_path: Path) -> Path:
    out = tmp_path / "script"
    write_rendering(build_plan(load(name).layout), out, "modelarts")
    return out / "run.sh"


DRY = {"DRY_RUN": "1", "NODE_NIC": "fakenic0"}


def one_line(stderr: str) -> str:
    """The entry's one line (the fake platform's inherited LD_PRELOAD makes ld.so talk too)."""
    lines = [line for line in stderr.strip().splitlines() if not line.startswith("ERROR: ld.so")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize(
    "address",
    [
        "fe80::1%$(touch {canary})",
        "fe80::1%`touch {canary}`",
        "fe80::1%$(touch${{IFS}}{canary})",
        "fe80::1%a b",
        "fe80::1%x\ny",
        "fe80::1%x 6.6.6.6",
        "fe80::1%",
        "fe80::1%abcdefghijklmnop",
        "10.88.0.2%eth0",
    ],
)
def test_scope_ids_that_are_not_interface_names_are_refused(address: str, tmp_path: Path) -> None:
    platform = create_platform(tmp_path / "platform", 2)
    canary = tmp_path / "PWNED"
    doc = json.loads(platform.rank_table.read_text())
    doc["server_group_list"][1]["server_list"][0]["server_ip"] = address.format(canary=canary)
    platform.rank_table.write_text(json.dumps(doc))
    run = run_node(platform, 0, render("a3/1p1d", tmp_path), extra_env=DRY)
    assert run.returncode == 1, run.stdout
    assert "server 1: server_ip" in one_line(run.stderr)
    assert not canary.exists() and not run.records
    assert "6.6.6.6" not in run.stdout


def test_an_interface_scope_id_is_accepted(tmp_path: Path) -> None:
    """Positive control: the scope ids a cluster has pass, unchanged, as one address."""
    platform = create_platform(tmp_path / "platform", 2)
    doc = json.loads(platform.rank_table.read_text())
    doc["server_group_list"][1]["server_list"][0]["server_ip"] = "fe80::1%enp1s0.10"
    platform.rank_table.write_text(json.dumps(doc))
    run = run_node(platform, 0, render("a3/1p1d", tmp_path), extra_env=DRY)
    assert run.returncode == 0, run.stderr
    assert "node 1: fake-pod-1 fe80::1%enp1s0.10" in run.stdout


UNREADABLE = {
    "utf-16": lambda good: good.decode().encode("utf-16"),
    "utf-16-no-bom": lambda good: good.decode().encode("utf-16-le"),
    "17 MB": lambda good: good[:-1] + b', "pad": "' + b"x" * (17 << 20) + b'"}',
    "nested": lambda good: b'{"a":' * 200_000 + b"1" + b"}" * 200_000,
    "not an object": lambda good: b"[" + good + b"]",
}


@pytest.mark.parametrize("kind", sorted(UNREADABLE))
def test_a_table_that_can_never_be_read_is_refused_at_once(kind: str, tmp_path: Path) -> None:
    platform = create_platform(tmp_path / "platform", 2)
    good = platform.rank_table.read_bytes()
    platform.rank_table.write_bytes(UNREADABLE[kind](good))
    run = run_node(
        platform, 0, render("a3/1p1d", tmp_path), extra_env={"RANK_TABLE_TIMEOUT": "1800"}
    )
    assert run.returncode == 1 and not run.records
    assert "cannot use" in one_line(run.stderr) and "rank table" in run.stderr
    assert "waiting for" not in run.stdout


def test_a_table_being_written_is_waited_for(tmp_path: Path) -> None:
    """Positive control: truncated JSON may still be being written, so it is waited for.

    The wait is seen with a timeout far beyond the test's own deadline (a busy machine
    may take more than a second to read the table once), then the timeout is seen alone.
    """
    platform = create_platform(tmp_path / "platform", 2)
    good = platform.rank_table.read_bytes()
    platform.rank_table.write_bytes(good[: len(good) // 2])
    script = render("a3/1p1d", tmp_path)
    extra = {"RANK_TABLE_TIMEOUT": "600", "RANK_TABLE_INTERVAL": "1"}
    waiting = start_node(platform, 0, script, extra_env=extra)
    try:
        wait_for_text(platform.node_dir(0) / "stdout", "status: not yet readable")
    finally:
        waiting.terminate()
        waiting.wait(30)
    run = run_node(platform, 0, script, extra_env={"RANK_TABLE_TIMEOUT": "1"})
    assert run.returncode == 1
    assert "timed out after 1s" in one_line(run.stderr)
    assert "last status: not yet readable" in run.stderr


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RANK_TABLE_TIMEOUT", "30m"),
        ("RANK_TABLE_TIMEOUT", "1e3"),
        ("RANK_TABLE_TIMEOUT", " 30"),
        ("RANK_TABLE_TIMEOUT", "-1"),
        ("RANK_TABLE_TIMEOUT", "08"),
        ("RANK_TABLE_TIMEOUT", "99999999999999999999"),
        ("RANK_TABLE_TIMEOUT", "$(touch {canary})"),
        ("RANK_TABLE_INTERVAL", "0.5"),
        ("RANK_TABLE_INTERVAL", "0"),
    ],
)
def test_a_wait_setting_that_is_not_whole_seconds_is_exit_2_at_once(
    name: str, value: str, tmp_path: Path
) -> None:
    platform = create_platform(tmp_path / "platform", 2, status="initializing")
    canary = tmp_path / "PWNED"
    run = run_node(
        platform,
        0,
        render("a3/1p1d", tmp_path),
        extra_env={name: value.format(canary=canary)},
        timeout=30,
    )
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert name in one_line(run.stderr)
    assert "waiting for" not in run.stdout and not canary.exists()


def test_sigterm_while_waiting_leaves_nothing_in_tmpdir(tmp_path: Path) -> None:
    platform = create_platform(tmp_path / "platform", 2, status="initializing")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    extra = {"TMPDIR": str(tmp), "RANK_TABLE_TIMEOUT": "600", "RANK_TABLE_INTERVAL": "1"}
    running = start_node(platform, 0, render("a3/1p1d", tmp_path), extra_env=extra)
    wait_for_text(platform.node_dir(0) / "stdout", "waiting for")
    assert list(tmp.glob("servekit-run.*")), "the entry should hold its state folder while waiting"
    running.terminate()
    run = running.wait(30)
    assert run.returncode == 143 and not run.timed_out
    assert not list(tmp.glob("servekit-run.*"))
