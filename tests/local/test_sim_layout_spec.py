"""``servekit sim --layout NAME``: a catalog layout's engines as one simulator spec."""

from __future__ import annotations

import json
from pathlib import Path

from servekit.local.simrun import layout_sim_spec


def test_a3_1p3d_becomes_52_endpoints_on_distinct_ports(tmp_path: Path) -> None:
    path = layout_sim_spec("a3/1p3d", tmp_path / "sim.json")
    doc = json.loads(path.read_text())
    eps = doc["endpoints"]
    assert len(eps) == 52
    assert sum(e["role"] == "prefill" for e in eps) == 4
    assert sum(e["role"] == "decode" for e in eps) == 48
    assert len({e["port"] for e in eps}) == 52
    assert {e["engine_id"] for e in eps if e["role"] == "decode"} == {"1", "3", "5"}
    assert all(e["guard"] for e in eps if e["role"] == "decode")
    kv_ports = {e["kv_port"] for e in eps}
    assert 0 not in kv_ports and not kv_ports & {e["port"] for e in eps}  # mapped, no clash
    assert {e["tp"] for e in eps if e["role"] == "prefill"} == {4}


def test_a_layout_whose_command_turns_prefix_caching_off_gets_a_simulator_without_it(
    tmp_path: Path,
) -> None:
    """a3/deepseekv4-flash/1p1d runs --no-enable-prefix-caching (its verified command)."""
    doc = json.loads(layout_sim_spec("a3/deepseekv4-flash/1p1d", tmp_path / "s.json").read_text())
    profiles = [e["profile"] for e in doc["endpoints"]]
    assert all(isinstance(p, dict) and p["enable_prefix_caching"] is False for p in profiles)
    on = json.loads(layout_sim_spec("a3/deepseekv4-flash/1node", tmp_path / "m.json").read_text())
    assert on["endpoints"][0]["profile"] == "a3-dsv4-flash"  # its command leaves caching on
