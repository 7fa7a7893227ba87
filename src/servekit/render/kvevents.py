"""KV events in the Plan: which engines publish, on which ports, and the words for it.

An engine the proxy routes to publishes its KV cache events when its
``kv_events`` setting is on and it can feed the proxy's kv-events policy
(:func:`servekit.defaults.kv_events_unfit`): vLLM's ``--kv-events-config``
with a ZMQ PUB endpoint ``tcp://*:PORT``. vLLM binds an endpoint only when it is a
wildcard (anything else it connects to), and each DP rank publishes on the
configured port plus its rank (``ZmqEventPublisher.offset_endpoint_port``, with
``data_parallel_index``, the global rank), so all ranks of an external-DP engine
share one config and rank ``r`` listens on ``port + r``.

Ports are planned here, per engine, from vLLM's default port
(:data:`servekit.defaults.KV_EVENTS_BASE_PORT`) up: the first base at which
every one of the engine's publishers is free on its node (not an API, DP rpc,
KV side-channel or proxy port, nor another engine's publisher). A process
started here with a port map publishes on its own mapped port: the configured
port is that port less its rank.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable

from servekit.catalog import Engine, Layout
from servekit.defaults import KV_EVENTS_BASE_PORT
from servekit.vocabulary import url_for

MAX_PORT = 65535


def events_config(port: int) -> str:
    """vLLM's ``--kv-events-config`` publishing on every address of the node at ``port``."""
    doc = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": url_for("*", port, scheme="tcp"),
    }
    return json.dumps(doc, separators=(",", ":"))


def publisher_offsets(engine: Engine) -> list[tuple[int, int]]:
    """(node, port offset from the engine's base) of each of its publishers.

    A replica is its own ``vllm serve`` (rank 0, so its own configured port); an
    external-DP rank ``r`` is offset by ``r``; a builtin-DP engine of one rank has one.
    """
    if engine.launch == "single":
        return [(engine.nodes[0], r) for r in range(engine.replicas)]
    if engine.launch == "external-dp":
        per = engine.dp_size_per_node
        return [(node, j * per + i) for j, node in enumerate(engine.nodes) for i in range(per)]
    return [(engine.nodes[0], 0)]


def _kv_windows(engine: Engine) -> Iterable[tuple[int, int]]:
    if engine.kv_port is None:
        return
    for j, node in enumerate(engine.nodes):
        for rank in range(j * engine.dp_size_per_node, (j + 1) * engine.dp_size_per_node):
            yield node, engine.kv_port + rank * engine.tp


def taken_ports(layout: Layout) -> dict[int, set[int]]:
    """Every port a node binds before KV events: API, DP rpc, KV side channels, proxy."""
    taken: dict[int, set[int]] = defaultdict(set)
    for e in layout.engines:
        for node in e.nodes:
            taken[node].update(range(e.api_port, e.api_port + e.ports_used))
        if e.rpc_port is not None:
            taken[e.nodes[0]].add(e.rpc_port)
        for node, port in _kv_windows(e):
            taken[node].add(port)
    if layout.proxy is not None:
        taken[layout.proxy.node].add(layout.proxy.port)
    return taken


def place(layout: Layout, publishing: Iterable[Engine]) -> dict[str, int]:
    """Engine name -> the base port of its publishers (rank ``r`` on base + r)."""
    taken = taken_ports(layout)
    bases: dict[str, int] = {}
    for engine in publishing:
        offsets = publisher_offsets(engine)
        top = max(o for _, o in offsets)
        base = KV_EVENTS_BASE_PORT
        while any(base + o in taken[node] for node, o in offsets):
            base += 1
        if base + top > MAX_PORT:
            raise ValueError(f"engine {engine.name}: no free ports left for its KV events")
        for node, o in offsets:
            taken[node].add(base + o)
        bases[engine.name] = base
    return bases
