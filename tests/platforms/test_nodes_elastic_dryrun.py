"""``nodes.elastic=on`` run as an operator runs it: a new machine joins and leaves, drained.

``a2/deepseekv4-flash/2p2d`` rendered for plain nodes starts on the fake nodes cluster
(every ``node<i>/run.sh`` under bash on its loopback address, simulated engines that,
as vLLM does by default, cut their requests on SIGTERM). Then ``bash
scale/decode0/run.sh 1 ADDRESS`` runs on a spare loopback address, a new machine:
its engine answers /health, it joins the proxy, the proxy routes to it (its token
counter grows), and a SIGTERM while streams run on it makes it leave first: no
request fails or is cut, every answer equals an undisturbed run's, the proxy saw no
backend fail and no longer holds it. The positive control is the same run with the
leave taken out of the script (the join-only script): the check sees what the leave
prevents, the proxy meeting a dead engine mid-request and keeping it in its pool
(its own retry and migration then save the clients' answers: with them off,
``benchmarks/nodes_elastic_leave.py`` measures the answers lost).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
from tests.platforms.nodes_elastic import (
    GROUP,
    LAYOUT,
    SETS,
    Answer,
    admin,
    clean,
    disturbed,
    join_only,
    pool,
    undisturbed,
    wait,
)

from servekit.platforms import leftovers
from servekit.platforms.nodes.fake import NodesDryCluster, nodes_dry_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[NodesDryCluster]:
    with nodes_dry_cluster(LAYOUT, sets=SETS, speed=1.0, spare=1) as running:
        yield running
    assert leftovers(running) == [], "processes of the dry run outlived its teardown"
    assert not running.root.exists()


@pytest.fixture(scope="module")
def baseline(cluster: NodesDryCluster) -> list[Answer]:
    answers = undisturbed(cluster)
    assert all(a.ok for a in answers), answers
    return answers


def test_a_new_machine_joins_serves_and_leaves_drained_and_the_control_does_not(
    cluster: NodesDryCluster, baseline: list[Answer]
) -> None:
    left = disturbed(cluster, 1)
    assert left.generated > 0, "the proxy never routed to the new engine"
    assert clean(left, baseline) == [], left.output
    assert left.returncode == 0
    said = left.output
    assert said.index("1 API(s) healthy") < said.index("joined the proxy")  # health first
    assert "engine id 6" in said  # 2p2d: ids 0-3 rendered; decode0 is group 2 of 4
    assert "prestop: " in said and ": drained" in said
    gone = disturbed(cluster, 2, entry=join_only(cluster))  # positive control
    assert gone.generated > 0
    wrong = clean(gone, baseline)
    assert wrong, "the control lost nothing: the check cannot tell a leave from none"
    assert gone.failures + gone.rescued > 0 and gone.held, wrong
    admin(cluster, "remove", {"urls": [f"http://{cluster.spare[0]}:7100"]})  # the operator's fix


def test_run_sh_stop_leaves_and_a_wrong_key_is_refused(cluster: NodesDryCluster) -> None:
    node = cluster.start_scaled(GROUP, 3)
    url = f"http://{cluster.spare[0]}:7100"
    wait("admitted", lambda: pool(cluster).get(url) == "healthy", node=node)
    # a join with another key (of a URL that answers /health): refused, nothing joined
    env = cluster.scaled_env("intruder", cluster.spare[0], {"SERVEKIT_ADMIN_KEY": "wrong"})
    env["PYTHONPATH"] = str(cluster.folder / "scale" / GROUP / "servekit-proxy.pyz")
    port = cluster.entry_url.rsplit(":", 1)[1]
    done = subprocess.run(
        [sys.executable, "-m", "servekit.proxy.join", "--proxies", cluster.nodes[0].address,
         "--port", port, "--urls", cluster.entry_url, "--key-env", "SERVEKIT_ADMIN_KEY",
         "--wait", "5"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "HTTP 401" in done.stderr, done.stderr
    assert cluster.entry_url not in pool(cluster)
    stop = subprocess.run(["bash", str(cluster.folder / "scale" / GROUP / "run.sh"), "stop", "3"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert stop.returncode == 0, stop.stderr
    assert node.popen is not None and node.popen.wait(60) == 0
    assert url not in pool(cluster)
    assert "the proxy let it go: drained" in node.output.read_text()


def test_an_instance_on_two_new_machines_joins_and_any_of_them_takes_it_out() -> None:
    """``a2/deepseekv4-flash/2p1x2d``'s decode spans two nodes (the second headless): each
    new machine runs its part (``NODE_RANK``), the first one's API joins, and the second
    one leaving takes the whole instance out of the pool before anything stops."""
    with nodes_dry_cluster("a2/deepseekv4-flash/2p1x2d", sets=SETS, speed=1.0,
                           spare=2) as multi:  # fmt: skip
        lead = multi.start_scaled("decode", 1, rank=0)
        tail = multi.start_scaled("decode", 1, rank=1)
        url = f"http://{multi.spare[0]}:7100"
        wait("admitted", lambda: pool(multi).get(url) == "healthy", node=lead)
        assert tail.popen is not None and tail.popen.poll() is None
        assert "scaled.decode0.n3-headless" in tail.output.read_text()
        tail.popen.send_signal(signal.SIGTERM)
        assert tail.popen.wait(60) == 0
        assert url not in pool(multi)
        assert "the proxy let it go: drained" in tail.output.read_text()
