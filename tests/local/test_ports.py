"""Port mapping: distinct free ports, a Plan port map, and taken ports refused."""

from __future__ import annotations

import socket

import pytest

from servekit.catalog.loader import load
from servekit.errors import UsageError
from servekit.local.ports import free_ports, map_to_free, port_is_free, require_free
from servekit.local.prepare import port_map


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports(20)
    assert len(set(ports)) == 20
    assert all(port_is_free(p) for p in ports)


def test_map_to_free_covers_every_planned_port_once() -> None:
    mapping = map_to_free([(0, 8100), (0, 8101), (0, 8100), (1, 8100)])
    assert sorted(mapping) == ["0:8100", "0:8101", "1:8100"]
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
    assert sorted(mapping) == ["0:8000", "0:8100", "0:8101"]
    assert len(set(mapping.values())) == 3
