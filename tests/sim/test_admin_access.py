"""The simulator's state-changing admin routes answer loopback peers only, unless opened.

``servekit sim serve`` binds where the rendered scripts say (often 0.0.0.0), so
its ``/sim/faults``, ``/sim/kill`` and ``/sim/restart`` would let anyone on the
network stop an engine: the mission's "never open an admin door by default".
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from unittest import mock

import pytest
from aiohttp.test_utils import make_mocked_request

from servekit.sim.http import ADMIN_FROM_ENV, admin_refusal
from servekit.sim.testing import RunningSim, running_sim

from .webclient import get, post


def _request(method: str, peer: str | None) -> object:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda key, default=None: (
        (peer, 40000) if key == "peername" and peer is not None else default
    )
    return make_mocked_request(method, "/sim/kill", transport=transport)


@pytest.mark.parametrize("peer", ["10.0.0.5", "192.0.2.7", "fd00::9", "::ffff:10.0.0.5", None])
def test_a_remote_or_unknown_peer_cannot_change_state(
    peer: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ADMIN_FROM_ENV, raising=False)
    refused = admin_refusal(_request("POST", peer))  # type: ignore[arg-type]
    assert refused is not None and refused.status == 403
    assert admin_refusal(_request("GET", peer)) is None  # type: ignore[arg-type]
    monkeypatch.setenv(ADMIN_FROM_ENV, "any")
    assert admin_refusal(_request("POST", peer)) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("peer", ["127.0.0.1", "127.0.0.3", "::1"])
def test_loopback_peers_may(peer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ADMIN_FROM_ENV, raising=False)
    assert admin_refusal(_request("POST", peer)) is None  # type: ignore[arg-type]


def _outside_address() -> str | None:
    """This machine's address on a non-loopback interface (how another host reaches it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent for UDP connect
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") else address


@pytest.fixture
def open_sim() -> Iterator[RunningSim]:
    spec = {"endpoints": [{"name": "a", "host": "0.0.0.0", "port": 0}]}
    with running_sim(spec) as running:
        yield running


def test_over_the_network_kill_is_refused_and_the_engine_keeps_serving(
    open_sim: RunningSim,
) -> None:
    outside = _outside_address()
    if outside is None:
        pytest.skip("this machine has no non-loopback IPv4 address to come from")
    port = open_sim.urls["a"].rsplit(":", 1)[1]
    remote = f"http://{outside}:{port}"
    status, body = post(f"{remote}/sim/kill", {})
    assert status == 403 and ADMIN_FROM_ENV in str(body)
    assert get(f"{remote}/health")[0] == 200
    assert get(f"{remote}/sim/state")[0] == 200  # read-only stays open
    assert post(f"{open_sim.urls['a']}/sim/kill", {})[0] == 200  # loopback may
