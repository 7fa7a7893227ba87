"""The dry runs' shared parts: a loopback block per cluster, held for its life."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from servekit.catalog import load
from servekit.errors import UsageError
from servekit.platforms.fake import BLOCKS, loopback_block
from servekit.platforms.table import write_rendering
from servekit.render import build_plan


def _always(prefix: str) -> bool:
    return True


def test_two_clusters_at_once_never_share_a_block() -> None:
    with loopback_block(_always, "ports") as first, loopback_block(_always, "ports") as second:
        assert first != second
    with loopback_block(_always, "ports") as again:
        assert again == first


HOLDER = """
import sys
from servekit.platforms.fake import loopback_block
with loopback_block(lambda prefix: True, "ports") as prefix:
    print(prefix, flush=True)
    sys.stdin.read()
"""


def test_a_block_held_by_another_process_is_skipped() -> None:
    other = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout is not None
        theirs = other.stdout.readline().strip()
        assert theirs.startswith("127.0.")
        with loopback_block(_always, "ports") as ours:
            assert ours != theirs
    finally:
        other.communicate("", timeout=30)


def test_a_block_whose_ports_are_taken_is_skipped_and_none_left_is_a_usage_error() -> None:
    with loopback_block(lambda prefix: prefix != "127.0.0", "ports") as prefix:
        assert prefix != "127.0.0"
    with (
        pytest.raises(UsageError, match=r"no loopback block .* has the pods' ports free"),
        loopback_block(lambda prefix: False, "the pods' ports"),
    ):
        pass
    assert BLOCKS > 1


def test_a_wildcard_proxy_listens_where_bind_host_says_and_on_the_source_address_by_default(
    tmp_path: Path,
) -> None:
    """A dry run plays each node's network namespace with BIND_HOST; a proxy that kept
    0.0.0.0 would take its port on every address, and two dry runs at once collided."""
    write_rendering(build_plan(load("a2/deepseekv4-flash/2p1x2d").layout), tmp_path / "r")
    script = tmp_path / "r" / "proxy.sh"
    env = {"PATH": "/usr/bin:/bin", "DRY_RUN": "1", "NODE0_IP": "10.0.0.1"}
    env |= {"NODE1_IP": "10.0.0.2", "NODE2_IP": "10.0.0.3"}

    def host(extra: dict[str, str]) -> str:
        out = subprocess.run(
            ["dash", str(script)], env=env | extra, capture_output=True, text=True, check=True
        ).stdout.splitlines()
        return out[out.index("--host") + 1]

    assert host({}) == "0.0.0.0"
    assert host({"BIND_HOST": "127.0.3.2"}) == "127.0.3.2"
