"""Port mapping: distinct free ports, a Plan port map, and taken ports refused."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from servekit.catalog.loader import load
from servekit.errors import UsageError
from servekit.local import portplan, ports as ports_module
from servekit.local.portplan import PortChoice, choose, port_map
from servekit.local.ports import (
    LOWEST_FREE_PORT,
    ephemeral_floor,
    free_ports,
    map_to_free,
    port_is_free,
    require_free,
)


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports(20)
    assert len(set(ports)) == 20
    assert all(port_is_free(p) for p in ports)


def test_free_ports_lie_below_the_ephemeral_range_where_it_leaves_room() -> None:
    """No auto-bound port (a transfer engine's, a client's) can take them before the
    engine binds them half a minute later (CI: ``Address already in use``)."""
    floor = ephemeral_floor()
    assert floor > LOWEST_FREE_PORT  # this machine leaves room (Linux: 32768)
    assert all(LOWEST_FREE_PORT <= p < floor for p in free_ports(50))


def test_a_taken_candidate_is_skipped_and_no_room_falls_back_to_the_kernel(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        monkeypatch.setattr(ports_module, "LOWEST_FREE_PORT", taken)
        monkeypatch.setattr(ports_module, "ephemeral_floor", lambda: taken + 1)
        got = free_ports(2)  # the one candidate is held: both from the kernel
        assert taken not in got and len(set(got)) == 2
    bad = tmp_path / "range"
    for text in ("", "x y", "\xff"):
        bad.write_text(text)
        assert ephemeral_floor(bad) == 32768


def test_map_to_free_covers_every_planned_port_once() -> None:
    mapping = map_to_free([(0, 8100), (0, 8101), (0, 8100), (1, 8100)])
    assert sorted(mapping) == [(0, 8100), (0, 8101), (1, 8100)]
    assert len(set(mapping.values())) == 3


def test_taken_port_is_one_line_naming_port_and_process() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert not port_is_free(port)
        with pytest.raises(UsageError) as err:
            require_free({port: "decode"})
    message = str(err.value)
    assert f"port {port} (decode) is already in use" in message
    assert "--free-ports" in message
    assert "\n" not in message


def test_layout_port_map_maps_all_planned_ports() -> None:
    layout = load("local/1p1d").layout
    mapping = port_map(layout, free_ports=True)
    # NIXL's side channels (kv_port 5600/5601) and the KV-event publishers (5557/5558)
    # are mapped with the API ports
    assert sorted(mapping) == [(0, p) for p in (5557, 5558, 5600, 5601, 8000, 8100, 8101)]
    assert len(set(mapping.values())) == 7


def test_nodes_that_share_ports_are_mapped_without_being_asked() -> None:
    layout = load("a3/1p3d").layout
    choice = choose(layout, free_ports=False)
    planned = {(node, port) for node, port, _ in portplan.planned(layout)}
    assert set(choice.mapping) == planned
    assert len(set(choice.mapping.values())) == len(planned)
    assert choice.note is not None and "\n" not in choice.note
    assert "4 nodes" in choice.note and "7100" in choice.note
    assert "mapped to a free local one" in choice.note and "--free-ports" in choice.note


def test_a_single_node_layout_keeps_its_planned_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[dict[int, str]] = []
    monkeypatch.setattr(portplan.ports, "require_free", checked.append)
    layout = load("a3/1node").layout
    choice = choose(layout, free_ports=False)
    assert choice == PortChoice({})
    assert checked == [{port: name for _, port, name in portplan.planned(layout)}]


def test_free_ports_maps_without_a_note() -> None:
    choice = choose(load("local/1p1d").layout, free_ports=True)
    assert sorted(choice.mapping) == [(0, p) for p in (5557, 5558, 5600, 5601, 8000, 8100, 8101)]
    assert choice.note is None
