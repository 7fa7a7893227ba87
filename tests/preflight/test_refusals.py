"""Each fault caught on its node, for its reason, before any engine starts; health launches.

The rendered entries run as on the platform: every node's ModelArts ``run.sh``
under dash against a real rank table (:func:`servekit.platforms.refused_cluster`),
or every engine pod's initContainer of the Kubernetes manifests
(:func:`servekit.platforms.k8s_refused`), each node on its own loopback address
with the stand-in ``hccn_tool`` and ``npu-smi`` of :mod:`servekit.platforms.fakenpu`
answering in the documented A2 and A3 formats. A fault is injected on one node;
every node must stop with the report naming that node and the reason, and no
process may have started. One cheap cluster per fault (the smallest that shows
it); the two layouts of the issue take every fault at once, and launch healthy.
"""

from __future__ import annotations

import json

import pytest

from servekit.platforms import (
    Faults,
    NodeOutcome,
    dry_cluster,
    k8s_refused,
    leftovers,
    refused_cluster,
)
from servekit.preflight.node import servekit_preflight_share as share

A2_2 = "a2/deepseekv4-flash/2nodes"  # one DP engine on 2 nodes: collective peers
A3_PD = "a3/deepseekv4-flash/1p1d"  # a prefill node and a decode node: KV peers
A3_3 = "a3/qwen3.5-397b-a17b/1p1x2d"  # 3 nodes: one TLS switch against two

# fault -> (layout, faults, the node it is on, what its report line says)
MATRIX: dict[str, tuple[str, Faults, str, str]] = {
    "link DOWN (A2)": (
        A2_2,
        Faults(link_down={1: (2,)}),
        "node 1",
        "link: NPU 2: link status DOWN",
    ),
    "TLS switch on one node (A3)": (
        A3_3,
        Faults(tls={2: 1}),
        "node 2",
        "TLS switch differs from the other nodes' (0 on node 0 (NPU 0-15), node 1 (NPU 0-15); "
        "1 on node 2 (NPU 0-15))",
    ),
    "peer unreachable (A3)": (
        A3_PD,
        Faults(unreachable={0: (1,)}),
        "node 0",
        "peers: NPU 0 cannot reach node 1 NPU 0 at 192.168.2.1 (hccn_tool -i 0 -hccs_ping",
    ),
    "port taken (A3)": (
        A3_PD,
        Faults(port_taken={1: 7100}),
        "node 1",
        "ports: port 7100 (decode0.dp0 API) is taken",
    ),
    "device busy (A2)": (
        A2_2,
        Faults(busy={0: (4,)}),
        "node 0",
        "busy: NPU 4 is busy: process 4242 (python3) holds 61000 MB of its memory",
    ),
    "model missing (A2)": (
        A2_2,
        Faults(model_missing=(1,)),
        "node 1",
        "model: model /root/model does not exist; mount the weights there",
    ),
}


def failures(out: NodeOutcome) -> list[str]:
    """The report's failure lines as one node printed them."""
    text = out.output.split("failures:\n", 1)[-1] if "failures:\n" in out.output else ""
    return [line.strip() for line in text.splitlines() if line.startswith("  ")]


def assert_refused(outcomes: list[NodeOutcome], node: str, reason: str) -> None:
    """Every node stopped, nothing started, and each names ``node`` and ``reason``."""
    assert outcomes and all(o.returncode == 1 for o in outcomes), [
        (o.pod, o.returncode, o.output[-800:]) for o in outcomes
    ]
    assert all(not o.started for o in outcomes), outcomes[0].started  # no engine's log
    for o in outcomes:
        lines = failures(o)
        mine = [line for line in lines if line.startswith(node) and reason in line]
        assert mine, (o.pod, lines, o.output[-1500:])
        # every other line is this node's, or a consequence pointed back at it
        assert all(node in line for line in lines), lines
        verdict = next(line for line in o.output.splitlines() if "preflight FAILED:" in line)
        assert node in verdict


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(MATRIX))
def test_each_fault_is_caught_on_its_node_before_any_engine_starts(fault: str) -> None:
    name, faults, node, reason = MATRIX[fault]
    assert_refused(refused_cluster(name, faults), node, reason)


# The issue's two layouts, every fault at once, each on its own node: (node, reason), the
# reason naming other units as {0}, {1}, ... (node K on ModelArts, its pod on Kubernetes).
A3_2P2D = "a3/deepseekv4-flash/2p2d"  # node 0 prefill0 + proxy, 1 prefill1, 2 decode0, 3 decode1
A2_8 = "a2/glm5.2/1x4p1x4d"  # prefill0 on nodes 0-3, decode0 on 4-7
EVERY: dict[str, tuple[Faults, list[tuple[int, str]]]] = {
    A3_2P2D: (
        Faults(
            model_missing=(0,),
            link_down={1: (5,)},
            port_taken={1: 7101},
            busy={2: (7,)},
            tls={2: 1},
            unreachable={3: (0,)},
        ),
        [
            (0, "model: model /root/model does not exist"),
            (1, "link: NPU 5: link status DOWN"),
            (1, "ports: port 7101 (prefill1.dp1 API) is taken"),
            (2, "busy: NPU 7 is busy: process 4242 (python3)"),
            (2, "TLS switch differs from the other nodes'"),
            (3, "peers: NPU 0 cannot reach {0} NPU 0 at 192.168.1.1"),
        ],
    ),
    A2_8: (
        Faults(
            model_missing=(0,),
            link_down={1: (3,)},
            tls={2: 1},
            unreachable={3: (4,)},
            busy={4: (6,)},
            port_taken={5: 9901},
            tools_missing=(6,),
        ),
        [
            (0, "model: model /root/model does not exist"),
            (1, "link: NPU 3: link status DOWN"),
            (2, "TLS switch differs from the other nodes'"),
            (3, "peers: NPU 0 cannot reach {4} NPU 0 at 10.20.4.1"),
            (4, "busy: NPU 6 is busy"),
            (5, "ports: port 9901 (decode0.dp3 API) is taken"),
            (6, "tools: hccn_tool not found"),
        ],
    ),
}


def assert_every_fault_named(
    outcomes: list[NodeOutcome], expected: list[tuple[int, str]], labels: list[str]
) -> None:
    """Every node refused, nothing started, and every node's report names each fault on
    the node it is on (``labels``: how the report names each unit)."""
    assert outcomes and all(o.returncode == 1 and not o.started for o in outcomes), [
        (o.pod, o.returncode, o.output[-600:]) for o in outcomes
    ]
    for o in outcomes:
        lines = failures(o)
        for index, reason in expected:
            said = reason.format(*labels)
            assert any(line.startswith(labels[index]) and said in line for line in lines), (
                o.pod,
                labels[index],
                said,
                lines,
            )
    assert all(failures(o) == failures(outcomes[0]) for o in outcomes)  # one report


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EVERY))
def test_the_issues_layouts_refuse_every_fault_on_modelarts(name: str) -> None:
    faults, expected = EVERY[name]
    outcomes = refused_cluster(name, faults)
    assert_every_fault_named(outcomes, expected, [f"node {i}" for i in range(len(outcomes))])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EVERY))
def test_the_issues_layouts_refuse_every_fault_on_kubernetes(name: str) -> None:
    """The same faults, each on the pod of that node, caught by the pods' initContainers
    (which never let an engine container start)."""
    faults, expected = EVERY[name]
    outcomes = k8s_refused(name, faults)
    assert_every_fault_named(outcomes, expected, [f"pod {o.pod}" for o in outcomes])


@pytest.mark.slow
def test_a3_2p2d_passes_its_preflight_and_launches() -> None:
    """A healthy cluster launches as before, its report in LOG_DIR/preflight/<layout>/."""
    with dry_cluster(A3_2P2D, speed=10.0, reference=False) as cluster:
        folder = cluster.logs / "preflight" / share.slug(A3_2P2D)
        report = json.loads((folder / "report.json").read_text())
        started = sorted(p.stem for p in cluster.logs.glob("*.log"))
    assert report["verdict"] == "ok" and report["failures"] == []
    assert [u["label"] for u in report["units"]] == [f"node {i}" for i in range(4)]
    pings = [p for u in report["units"] for p in u["pings"]]
    assert len(pings) == 4 * 2 * 16 and all(p["ok"] for p in pings)  # each node: 2 peers x 16
    assert "proxy" in started and len(started) == 4 + 4 + 16 + 16 + 1
    assert leftovers(cluster) == [] and not cluster.root.exists()
