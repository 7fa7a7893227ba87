"""One node's checks on the stand-in fabric, and the comparison across nodes, in process.

Each fault of :mod:`servekit.platforms.fakenpu` makes exactly its check fail, for
its reason, on the node it is on; a healthy node passes every check (the
positive control). The stand-in ``hccn_tool`` and ``npu-smi`` answer as the
docs/preflight.md formats say; the node program runs them as it would the real
ones. The exchange runs here too: two units in threads, over HTTP on two
loopback addresses and through a shared folder.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from tests.preflight.helpers import fabric_for, plan_of, spec_of

from servekit.platforms.fake import layouts_are_free, loopback_block
from servekit.platforms.fakenpu import Faults, npu_address
from servekit.preflight.node import (
    servekit_preflight as entry,
    servekit_preflight_probe as probe,
    servekit_preflight_share as share,
)

A2 = "a2/deepseekv4-flash/2nodes"  # one DP engine on two 8-NPU nodes
A3 = "a3/deepseekv4-flash/1p1d"  # prefill node, decode node, 16 NPUs each


def local(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, faults: Faults, index: int = 1
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Node ``index``'s own checks on a fabric with ``faults``."""
    fabric = fabric_for(name, tmp_path / "npu", faults)
    env = fabric.add(index)
    if "FAKEPLATFORM_NPU" in env:
        monkeypatch.setenv("FAKEPLATFORM_NPU", env["FAKEPLATFORM_NPU"])
    spec = spec_of(name)
    node = probe.Node(env["PREFLIGHT_ROOT"])
    # the node's address in a block whose ports are free (others share this machine)
    with loopback_block(layouts_are_free([plan_of(name)]), "the layout's ports") as prefix:
        return probe.local_checks(node, spec, spec["units"][index], f"{prefix}.{2 + index}")


def failing(checks: list[dict[str, Any]]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for c in checks:
        if c["level"] == "fail":
            found.setdefault(c["check"], []).append(c["detail"])
    return found


@pytest.mark.parametrize("name", [A2, A3])
def test_a_healthy_node_passes_every_check(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks, facts = local(name, tmp_path, monkeypatch, Faults())
    assert failing(checks) == {}
    platform = "a3" if name == A3 else "a2"
    count = 16 if platform == "a3" else 8
    assert facts["npu_ips"] == {str(d): npu_address(platform, 1, d) for d in range(count)}
    assert set(facts["tls"].values()) == {0}
    assert facts["down"] == [] and facts["driver"] == "25.2.0"
    ran = {c["check"] for c in checks if c["level"] == "ok"}
    assert {
        "tools",
        "devices",
        "busy",
        "link",
        "net_health",
        "npu_ip",
        "tls",
        "ports",
        "model",
    } <= ran
    assert ("superpod" in ran) == (platform == "a3")
    if platform == "a3":
        assert (
            facts["superpod"]["15"] == 0
            and facts["sdid"]["3"] == (1 << 22) | (1 << 18) | (1 << 16) | 3
        )


FAULTS = {
    "link DOWN": (Faults(link_down={1: (3,)}), "link", "NPU 3: link status DOWN"),
    "device busy": (
        Faults(busy={1: (5,)}),
        "busy",
        "NPU 5 is busy: process 4242 (python3) holds 61000 MB",
    ),
    "model missing": (
        Faults(model_missing=(1,)),
        "model",
        "/root/model does not exist; mount the weights there",
    ),
    "tools missing": (
        Faults(tools_missing=(1,)),
        "tools",
        "hccn_tool not found in PATH, /usr/local/Ascend/driver/tools or /usr/local/sbin; it ships "
        "with the host NPU driver: mount it into the container "
        "(-v /usr/local/Ascend/driver:/usr/local/Ascend/driver)",
    ),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_local_fault_fails_its_check_for_its_reason(
    fault: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    faults, check, reason = FAULTS[fault]
    checks, _ = local(A2, tmp_path, monkeypatch, faults)
    bad = failing(checks)
    assert check in bad and any(reason in d for d in bad[check]), bad
    others = set(bad) - {check, "net_health"}  # a link DOWN is also unhealthy
    if fault == "tools missing":
        others -= {"busy", "link"}  # nothing to query the NPUs with
    assert others == set(), bad


def test_a_port_taken_on_the_node_is_named_with_its_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = spec_of(A2)
    port, owner = spec["units"][0]["ports"][0]  # node 1 runs headless ranks: no port
    fabric = fabric_for(A2, tmp_path / "npu")
    env = fabric.add(0)
    monkeypatch.setenv("FAKEPLATFORM_NPU", env["FAKEPLATFORM_NPU"])
    with (
        loopback_block(layouts_are_free([plan_of(A2)]), "the layout's ports") as prefix,
        socket.socket() as held,
    ):
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as any server would
        held.bind((f"{prefix}.2", port))
        held.listen(1)
        node = probe.Node(env["PREFLIGHT_ROOT"])
        checks, _ = probe.local_checks(node, spec, spec["units"][0], f"{prefix}.2")
    assert failing(checks) == {
        "ports": [
            f"port {port} ({owner}) is taken on {prefix}.2 (Address already in use); "
            f"stop what listens there (ss -ltnp | grep :{port})"
        ]
    }


def test_an_unreadable_tls_switch_is_a_warning_not_a_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check_hccn.sh notes it and goes on: a container without device admin rights."""
    fabric = fabric_for(A2, tmp_path / "npu")
    env = fabric.add(1)
    (Path(env["FAKEPLATFORM_NPU"]) / "hccn" / "4" / "tls").unlink()
    monkeypatch.setenv("FAKEPLATFORM_NPU", env["FAKEPLATFORM_NPU"])
    spec = spec_of(A2)
    checks, facts = probe.local_checks(
        probe.Node(env["PREFLIGHT_ROOT"]), spec, spec["units"][1], "127.0.0.1"
    )
    assert failing(checks) == {}
    assert [c["detail"][:40] for c in checks if c["level"] == "warn"] == [
        "NPU 4: no TLS switch in hccn_tool -i 4 -"
    ]
    assert "4" not in facts["tls"] and len(facts["tls"]) == 7


def test_a_missing_shard_or_device_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fabric = fabric_for(A2, tmp_path / "npu")
    (fabric.model / "model-00002-of-00002.safetensors").unlink()
    env = fabric.add(0)
    (Path(env["PREFLIGHT_ROOT"]) / "dev" / "davinci6").unlink()
    monkeypatch.setenv("FAKEPLATFORM_NPU", env["FAKEPLATFORM_NPU"])
    spec = spec_of(A2)
    checks, _ = probe.local_checks(
        probe.Node(env["PREFLIGHT_ROOT"]), spec, spec["units"][0], "127.0.0.1"
    )
    bad = failing(checks)
    assert (
        bad["model"]
        == [
            "model /root/model misses 1 of 2 weight files its index names "
            "(model-00002-of-00002.safetensors)"
        ]
        or "misses 1 of 2 weight files" in bad["model"][0]
    )
    assert "/dev/davinci6 is missing" in bad["devices"][0]
    assert "--device=/dev/davinci6" in bad["devices"][0]


# ------------------------------------------------------------- across nodes


def _doc(unit: str, node: int, **facts: Any) -> dict[str, Any]:
    return {
        "schema": share.NODE_SCHEMA,
        "unit": unit,
        "label": f"node {node}",
        "node": node,
        "phase": "final",
        "platform": "a2",
        "address": f"10.0.0.{node + 1}",
        "checks": [probe.ok("link", "NPUs 0-7")],
        "facts": {"tls": {str(d): 0 for d in range(8)}, **facts},
        "pings": [],
    }


def _spec(count: int) -> dict[str, Any]:
    units = [
        {"name": f"node{i}", "label": f"node {i}", "node": i, "peers": []} for i in range(count)
    ]
    return {"layout": "x", "platform": "a2", "units": units}


def test_the_odd_tls_switch_is_named_on_its_node() -> None:
    docs = {f"node{i}": _doc(f"node{i}", i) for i in range(3)}
    docs["node2"]["facts"]["tls"] = {str(d): 1 for d in range(8)}
    report = share.compare(_spec(3), docs, 60)
    assert report["verdict"] == "fail"
    assert report["failures"] == [
        "node 2: TLS switch differs from the other nodes' "
        "(0 on node 0 (NPU 0-7), node 1 (NPU 0-7); 1 on node 2 (NPU 0-7))"
    ]
    rows = {r["label"]: r["verdict"] for r in report["units"]}
    assert rows == {"node 0": "ok", "node 1": "ok", "node 2": "fail"}
    assert "DIFFERS" in share.report_text(report).splitlines()[4]  # node 2's row


def test_hccn_settings_must_match_but_addresses_may_differ() -> None:
    docs = {f"node{i}": _doc(f"node{i}", i) for i in range(3)}
    for i, doc in enumerate(docs.values()):
        doc["facts"]["hccn_conf"] = {
            "address_0": f"10.20.{i}.1",
            "gateway_0": f"10.20.{i}.254",
            "netmask_0": "255.255.255.0",
            "send_arp_status_0": "1",
        }
    assert share.compare(_spec(3), docs, 60)["verdict"] == "ok"  # addresses are the node's own
    docs["node1"]["facts"]["hccn_conf"]["netmask_0"] = "255.255.0.0"
    report = share.compare(_spec(3), docs, 60)
    assert report["failures"] == [
        "node 1: hccn.conf netmask_0 differs from the other nodes' "
        "(255.255.255.0 on node 0, node 2; 255.255.0.0 on node 1)"
    ]


def test_a_unit_that_never_reports_fails_the_launch() -> None:
    report = share.compare(_spec(2), {"node0": _doc("node0", 0), "node1": None}, 30)
    assert report["verdict"] == "fail"
    assert report["failures"][0].startswith("node 1: did not report within 30 s")


def test_a_ping_failure_points_at_the_peers_own_link() -> None:
    docs = {"node0": _doc("node0", 0), "node1": _doc("node1", 1, down=[3])}
    detail = "NPU 3 cannot reach node 1 NPU 3 at 10.20.1.4 (hccn_tool ...)"
    docs["node0"]["checks"].append(probe.fail("peers", detail))
    docs["node0"]["pings"] = [
        {"peer": "node1", "device": 3, "from": 3, "address": "10.20.1.4", "ok": False}
    ]
    docs["node1"]["checks"].append(probe.fail("link", "NPU 3: link status DOWN"))
    report = share.compare(_spec(2), docs, 30)
    assert report["failures"] == [
        "node 1 (10.0.0.2): link: NPU 3: link status DOWN",  # the cause first
        f"node 0 (10.0.0.1): peers: {detail} -> its link is not UP (node 1)",
    ]


# ------------------------------------------------------------- the exchange


def _run_two(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, shared: Path | None, faults: Faults
) -> tuple[dict[str, int], Path]:
    """Both nodes of A2 at once, in threads, as two entries would run them."""
    fabric = fabric_for(A2, tmp_path / "npu", faults)
    envs = [fabric.add(i) for i in range(2)]
    spec = spec_of(A2)
    out = tmp_path / "logs"
    results: dict[str, int] = {}
    with loopback_block(layouts_are_free([plan_of(A2)]), "the layout's ports") as prefix:
        ip = [f"{prefix}.2", f"{prefix}.3"]
        _exchange(spec, envs, ip, shared, out, results)
    return results, out / "preflight" / share.slug(A2)


def _exchange(
    spec: dict[str, Any],
    envs: list[dict[str, str]],
    ip: list[str],
    shared: Path | None,
    out: Path,
    results: dict[str, int],
) -> None:
    addresses = " ".join(ip)
    with socket.socket() as s:  # one port both units serve on, each on its own address
        s.bind((ip[0], 0))
        port = s.getsockname()[1]

    class StateNode(probe.Node):
        """A node whose tools see its own fabric state (threads share one environment)."""

        def __init__(self, env: dict[str, str]) -> None:
            super().__init__(env["PREFLIGHT_ROOT"], self.runs)
            self.state = env["FAKEPLATFORM_NPU"]

        def runs(self, argv: list[str], timeout: float = 30.0) -> tuple[int, str]:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, check=False,
                env={"PATH": "/usr/bin:/bin", "FAKEPLATFORM_NPU": self.state},
            )  # fmt: skip
            return done.returncode, done.stdout + done.stderr

    def one(i: int) -> None:
        results[f"node{i}"] = entry.run_unit(
            spec, f"node{i}", addresses, listen=ip[i], bind_ports=ip[i],
            node=StateNode(envs[i]), timeout=30.0, shared=str(shared) if shared else None,
            log_dir=str(out), port=port,
        )  # fmt: skip

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)


@pytest.mark.parametrize("how", ["http", "shared folder"])
def test_two_units_exchange_compare_and_agree(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared" if how == "shared folder" else None
    if shared:
        shared.mkdir()
    results, folder = _run_two(tmp_path, monkeypatch, shared=shared, faults=Faults())
    assert results == {"node0": 0, "node1": 0}
    report = entry.report_folder(str(folder))
    assert report["verdict"] == "ok" and len(report["units"]) == 2
    pings = [p for r in report["units"] for p in r["pings"]]
    assert len(pings) == 16 and all(p["ok"] for p in pings)  # 8 NPUs each way


def test_one_units_fault_stops_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results, folder = _run_two(
        tmp_path, monkeypatch, shared=None, faults=Faults(unreachable={0: (1,)})
    )
    assert results == {"node0": 1, "node1": 1}
    report = entry.report_folder(str(folder))
    assert [r["verdict"] for r in report["units"]] == ["fail", "ok"]
    assert all(f.startswith("node 0 (") and ": peers: NPU" in f for f in report["failures"])
    assert "cannot reach node 1 NPU 0 at 10.20.1.1" in report["failures"][0]


@pytest.mark.slow
def test_a_unit_restarted_alone_does_not_wait_for_peers_already_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod recreated alone (a rollout): its peer runs its engines and checks nothing; the
    peer's API answering /health is enough, said as a warning; a silent peer still fails."""
    import http.server

    fabric = fabric_for(A3, tmp_path / "npu")
    env = fabric.add(1)
    monkeypatch.setenv("FAKEPLATFORM_NPU", env["FAKEPLATFORM_NPU"])
    spec = spec_of(A3)
    port = next(p for p, owner in spec["units"][0]["ports"] if owner.endswith(" API"))

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    with loopback_block(layouts_are_free([plan_of(A3)]), "the layout's ports") as prefix:
        ip = [f"{prefix}.2", f"{prefix}.3"]
        with socket.socket() as s:
            s.bind((ip[1], 0))
            exchange = s.getsockname()[1]
        how = {"listen": ip[1], "bind_ports": ip[1], "port": exchange, "timeout": 3.0,
               "node": probe.Node(env["PREFLIGHT_ROOT"]), "log_dir": str(tmp_path / "logs")}  # fmt: skip
        silent = entry.run_unit(spec, "node1", " ".join(ip), **how)
        server = http.server.HTTPServer((ip[0], port), Health)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            served = entry.run_unit(spec, "node1", " ".join(ip), **how)
        finally:
            server.shutdown()
            server.server_close()
    assert silent == 1  # nobody there: "did not report"
    assert served == 0
    doc = share.read_doc(
        (tmp_path / "logs" / "preflight" / share.slug(A3) / "node1.json").read_bytes(),
        "node1",
        "final",
    )
    assert doc is not None
    assert "node0 (KV prefill0 -> decode0) is already serving: not pinged" in [
        c["detail"] for c in doc["checks"] if c["level"] == "warn"
    ]
