"""A plain-nodes dry run on this machine: every node's rendered ``run.sh`` on a loopback node.

What an operator does on plain nodes, done here with nothing faked but the engine:

1. render the layout for plain nodes (``servekit render NAME --target nodes``, with
   the ``--set``s given: ``nodes.elastic=on`` among them);
2. export every node's address (``NODE<i>_IP``: 127.0.N.2, 127.0.N.3, ...) and, for an
   elastic rendering, the proxy's admin key (``SERVEKIT_ADMIN_KEY``);
3. run ``bash node<i>/run.sh`` for every node, with ``BIND_HOST`` its own address,
   ``NODE_NIC=lo`` and the simulated ``vllm`` first on ``PATH``
   (:mod:`servekit.platforms.fake`), and wait until every engine and the proxy answer;
4. (elastic) :meth:`NodesDryCluster.start_scaled` runs ``bash scale/<group>/run.sh
   INDEX ADDRESS...`` on spare loopback addresses beyond the nodes: new machines.

:func:`nodes_dry_cluster` does all of that and tears it down: the new machines first
(each leaves the proxy as it stops), then the nodes; every process group stopped,
the temporary folder removed.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servekit.catalog import load
from servekit.errors import UsageError
from servekit.local import port_is_free
from servekit.platforms.fake import (
    DryCluster,
    Node,
    layouts_are_free,
    loopback_block,
    node_env,
    simulated_vllm,
    stop_nodes,
    wait_ready,
)
from servekit.platforms.nodes.entry import render
from servekit.platforms.nodes.settings import ADMIN_KEY_ENV, NAMES
from servekit.platforms.prepare import render_named, split_sets
from servekit.platforms.request import Files
from servekit.procgroup import start_detached
from servekit.render import PlanOptions, build_plan, write_files


@dataclass
class NodesDryCluster(DryCluster):
    """A running plain-nodes dry run, and the spare addresses new machines take."""

    folder: Path = Path()
    """The rendered folder (``node<i>/``, ``scale/<group>/``)."""
    spare: tuple[str, ...] = ()
    exports: dict[str, str] = field(default_factory=dict)
    """What the operator exports on every node and new machine (addresses, the key)."""
    admin_key: str = ""
    speed: float | None = None
    scaled: list[Node] = field(default_factory=list)

    def scaled_env(
        self, name: str, address: str, extra: dict[str, str] | None = None
    ) -> dict[str, str]:
        """A new machine's environment: a node's, its own logs, and ``extra`` over all."""
        env = node_env(self.root, name, address, speed=self.speed, bin_dir=self.root / "bin",
                       platform=self.exports)  # fmt: skip
        env["LOG_DIR"] = str(self.logs / name)
        return {**env, **(extra or {})}

    def start_scaled(
        self,
        group: str,
        index: int,
        addresses: Sequence[str] | None = None,
        *,
        rank: int = 0,
        extra: dict[str, str] | None = None,
        entry: Path | None = None,
    ) -> Node:
        """Start ``bash scale/<group>/run.sh INDEX ADDRESS...`` as machine ``rank`` of the
        instance (``addresses``: the spare ones by default); ``entry``: another script run
        the same way (a positive control's copy)."""
        given = tuple(addresses) if addresses is not None else self.spare
        name = f"scale-{group}-{index}-{rank}"
        script = entry or self.folder / "scale" / group / "run.sh"
        env = self.scaled_env(name, given[rank], {"NODE_RANK": str(rank), **(extra or {})})
        node = Node(name, given[rank], script, env=env)
        with node.output.open("wb") as out:
            node.popen = start_detached(["bash", str(script), str(index), *given], stdout=out,
                                        env=env, cwd=self.root / "start")  # fmt: skip
        self.scaled.append(node)
        return node


def _spare_free(ports: Sequence[int], count: int, after: int) -> Callable[[str], bool]:
    def check(prefix: str) -> bool:
        return all(
            port_is_free(port, f"{prefix}.{after + k}", reuse=True)
            for k in range(count)
            for port in ports
        )

    return check


@contextlib.contextmanager
def nodes_dry_cluster(
    name: str,
    *,
    sets: Sequence[str] = (),
    speed: float | None = None,
    catalog: str | None = None,
    spare: int = 0,
    ready_timeout_s: float = 180.0,
    keep: bool = False,
    rewrite: Callable[[Files], None] | None = None,
    **_: object,
) -> Iterator[NodesDryCluster]:
    """Render for plain nodes, start every node's ``run.sh`` under bash, wait; tear down on
    exit. ``spare``: loopback addresses kept free beyond the nodes for new machines;
    ``rewrite``: what a benchmark changes in the rendered files before they start (a
    handicapped proxy, for a control)."""
    if shutil.which("bash") is None:
        raise UsageError("bash is not installed; the nodes' run.sh runs under bash")
    settings, layout_sets = split_sets("nodes", NAMES, list(sets), ("nodes",))
    layout_name, files = render_named(render, name, settings, layout_sets, catalog)
    if rewrite is not None:
        rewrite(files)
    layout = load(layout_name, catalog).layout
    plan = build_plan(layout)
    ports = sorted({port for p in plan.processes if p.kind == "engine" for port in p.bound_ports()})
    root = Path(tempfile.mkdtemp(prefix="servekit-nodes-dryrun-"))
    held = contextlib.ExitStack()
    cluster: NodesDryCluster | None = None
    try:
        for sub in ("bin", "home", "tmp", "start", "logs", "work"):
            (root / sub).mkdir()
        simulated_vllm(root / "bin")
        write_files(files, root / "rendered")
        rendered_free = layouts_are_free([layout])
        spare_free = _spare_free(ports, spare, 2 + layout.nodes)

        def free(prefix: str) -> bool:
            return rendered_free(prefix) and spare_free(prefix)

        prefix = held.enter_context(loopback_block(free, "the layout's ports"))
        addresses = tuple(f"{prefix}.{2 + i}" for i in range(layout.nodes))
        key = secrets.token_hex(16)
        exports = {f"NODE{i}_IP": a for i, a in enumerate(addresses)} | {ADMIN_KEY_ENV: key}
        nodes = [
            Node(f"node{i}", a, root / "rendered" / f"node{i}" / "run.sh")
            for i, a in enumerate(addresses)
        ]
        resolved = build_plan(layout, PlanOptions(hosts=addresses))
        cluster = NodesDryCluster(
            layout_name, root, nodes, resolved.process(resolved.entry).url or "", root / "logs",
            folder=root / "rendered",
            spare=tuple(f"{prefix}.{2 + layout.nodes + k}" for k in range(spare)),
            exports=exports, admin_key=key, speed=speed,
        )  # fmt: skip
        started = time.perf_counter()
        for node in nodes:
            env = node_env(root, node.pod, node.address, speed=speed, bin_dir=root / "bin",
                           platform=exports)  # fmt: skip
            with node.output.open("wb") as out:
                node.popen = start_detached(["bash", str(node.entry)], stdout=out, env=env,
                                            cwd=root / "start")  # fmt: skip
        targets = [
            (p.url, p.proxy.backend_counts() if p.proxy else {})
            for p in resolved.api_processes()
            if p.url is not None
        ]
        wait_ready(targets, nodes, ready_timeout_s, root / "logs")
        cluster.started_s = time.perf_counter() - started
        yield cluster
    finally:
        if cluster is not None:
            stop_nodes(cluster.scaled)
            stop_nodes(cluster.nodes)
        held.close()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
