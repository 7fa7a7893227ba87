"""One handler per handoff protocol in the proxy and in the simulator, chosen from
servekit.kvprotocol's one table."""

from __future__ import annotations

from servekit.kvprotocol import HANDOFFS, LEASE_ENV, protocol_of_mode
from servekit.proxy.protocols import HANDLERS, handler_for
from servekit.sim.protocols import HANDLERS as SIM_HANDLERS
from servekit.vocabulary import KV_PROTOCOLS, PROXY_MODE_OF, PROXY_MODES


def test_every_protocol_has_one_handler_in_the_module_the_table_names() -> None:
    assert set(HANDLERS) == set(HANDOFFS) == set(KV_PROTOCOLS)
    assert set(SIM_HANDLERS) == set(KV_PROTOCOLS)
    for side, table in (("proxy", HANDLERS), ("sim", SIM_HANDLERS)):
        for protocol, handler in table.items():
            assert handler.protocol == protocol
            module = HANDOFFS[protocol].module
            assert type(handler).__module__ == f"servekit.{side}.protocols.{module}"


def test_each_mode_picks_its_protocols_handler_and_replica_none() -> None:
    for protocol, mode in PROXY_MODE_OF.items():
        assert protocol_of_mode(mode) == protocol
        assert handler_for(mode) is HANDLERS[protocol]
    assert [m for m in PROXY_MODES if handler_for(m) is None] == ["replica"]


def test_a_protocol_holds_a_lease_where_its_connectors_read_one() -> None:
    for protocol, handler in HANDLERS.items():
        assert handler.holds_lease == (protocol in LEASE_ENV)
