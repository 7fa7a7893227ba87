"""A cluster dry run on this machine: the rendered ModelArts scripts on loopback nodes.

What a user does on the platform, done here with nothing faked but the engine:

1. render the layout for ModelArts (``servekit render NAME --target modelarts``);
2. write a real ``global_rank_table.json`` (``status: completed``, one server per
   node with its own loopback address 127.0.0.2, 127.0.0.3, ... and a pod name;
   group 0 holds node 0 alone);
3. run every node's ``run.sh`` under ``dash`` with ``RANK_TABLE_FILE``,
   ``NODE_POD_NAME`` (all nodes share this machine's hostname), ``BIND_HOST`` (the
   node's address), ``NODE_NIC=lo``, ``WORK_DIR``, ``LOG_DIR`` and a two-line
   ``vllm`` on ``PATH`` that runs ``servekit sim serve`` (the simulated engine
   takes the exact ``vllm serve`` command line the scripts build);
4. give each node the filesystem and NPU fabric the preflight checks
   (:mod:`servekit.platforms.fakenpu`: devices, the driver with stand-in
   ``hccn_tool`` and ``npu-smi``, ``/etc/hccn.conf``, the model; ``faults``
   injects what must be caught), so the entry's preflight runs as on the platform;
5. wait until every engine and the proxy answer ``/health``.

:func:`dry_cluster` does all of that and tears it down (every process group
stopped, the temporary folder removed); :func:`refused_cluster` starts the
nodes the same way and waits for every entry to stop (a preflight that refuses
the launch), returning each node's exit status and output. The layout's reference layout
(``verify.reference``), when it has one, is started the same way on the next
address, so ``verify --reference URL`` can compare PD with a single instance.
``servekit verify NAME --target URL --nodes ... --logs DIR`` then checks the
cluster as it would a real one. ``benchmarks/cluster_dryrun.py`` times it. The loopback nodes, the
simulated ``vllm`` and the teardown are every fake platform's (:mod:`servekit.platforms.fake`).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from servekit.catalog import Layout, load
from servekit.errors import UsageError
from servekit.importer import default_groups, write_rank_table_file
from servekit.platforms.fake import (
    DryCluster,
    Node,
    NodeOutcome,
    layouts_are_free,
    loopback_block,
    node_env,
    simulated_vllm,
    stop_nodes,
    wait_exits,
    wait_ready,
)
from servekit.platforms.fakenpu import HEALTHY, Fabric, Faults, taken_ports
from servekit.platforms.modelarts.entry import render
from servekit.platforms.request import RenderRequest
from servekit.preflight import PLATFORM_OF, PORT_BASE as PREFLIGHT_PORT
from servekit.procgroup import start_detached
from servekit.render import PlanOptions, build_plan, write_files


def _env(root: Path, node: Node, speed: float | None, bin_dir: Path) -> dict[str, str]:
    injected = {
        "RANK_TABLE_FILE": str(root / "config" / "global_rank_table.json"),
        "RANK_TABLE_TIMEOUT": "30",
        "RANK_TABLE_INTERVAL": "1",
        "NODE_POD_NAME": node.pod,
        "STOP_TIMEOUT": "10",
        "PREFLIGHT_TIMEOUT": "60",
        **node.env,
    }
    return node_env(root, node.pod, node.address, speed=speed, bin_dir=bin_dir, platform=injected)


def _start(root: Path, node: Node, speed: float | None, bin_dir: Path) -> None:
    with node.output.open("wb") as out:
        node.popen = start_detached(
            ["dash", str(node.entry)],
            stdout=out,
            env=_env(root, node, speed, bin_dir),
            cwd=root / "start",
        )


def _layout_nodes(
    root: Path, layout: Layout, prefix: str, first: int, tag: str, *, faults: Faults
) -> list[Node]:
    folder = root / tag
    write_files(render(RenderRequest(build_plan(layout))), folder / "script")
    fabric = _fabric(root / "npu" / tag, layout, faults)
    return [
        Node(
            f"{tag}-node{i}",
            f"{prefix}.{first + i}",
            folder / "script" / "run.sh",
            env=fabric.add(i),
        )
        for i in range(layout.nodes)
    ]


def _fabric(folder: Path, layout: Layout, faults: Faults) -> Fabric:
    platform = PLATFORM_OF.get(layout.hardware.accelerator, "cpu")
    return Fabric(folder, platform, layout.hardware.devices_per_node, faults)


def _urls(layout: Layout, nodes: Sequence[Node]) -> list[tuple[str, dict[str, int]]]:
    """Each API server's URL and, for the proxy, the backend counts it must report."""
    plan = build_plan(layout, PlanOptions(hosts=tuple(n.address for n in nodes)))
    return [
        (p.url, p.proxy.backend_counts() if p.proxy else {})
        for p in plan.api_processes()
        if p.url is not None
    ]


@dataclass
class _Prepared:
    """A dry run laid out and not started: its folder, nodes and what they wait for."""

    root: Path
    bin_dir: Path
    cluster: DryCluster
    groups: list[tuple[Layout, Sequence[Node]]]


@contextlib.contextmanager
def _prepared(
    name: str,
    catalog: str | None,
    reference: bool,
    faults: Faults,
    keep: bool,
    *,
    preflight: bool = True,
) -> Iterator[_Prepared]:
    """Render, write the rank table and lay out every node; remove it all on exit."""
    if shutil.which("dash") is None:
        raise UsageError(
            "dash is not installed; the dry run runs run.sh under dash (apt install dash)"
        )
    layout = load(name, catalog).layout
    ref_name = layout.verify.reference if reference else None
    ref_layout = load(ref_name, catalog).layout if ref_name else None
    root = Path(tempfile.mkdtemp(prefix="servekit-dryrun-"))
    held = contextlib.ExitStack()
    try:
        for sub in ("bin", "config", "home", "tmp", "start", "logs", "work"):
            (root / sub).mkdir()
        bin_dir = root / "bin"
        simulated_vllm(bin_dir)
        ours = [x for x in (layout, ref_layout) if x is not None]
        free = layouts_are_free(ours, extra_ports=(PREFLIGHT_PORT,))
        prefix = held.enter_context(loopback_block(free, "the layout's ports"))
        nodes = _layout_nodes(root, layout, prefix, 2, "cluster", faults=faults)
        for node in nodes if not preflight else ():
            node.env["PREFLIGHT"] = "0"  # the entry's switch, as an operator sets it
        held.enter_context(taken_ports(faults, [n.address for n in nodes]))
        servers = [(n.address, n.pod) for n in nodes]
        write_rank_table_file(
            root / "config" / "global_rank_table.json", servers, default_groups(len(nodes))
        )
        cluster = DryCluster(name, root, nodes, "", root / "logs")
        plan = build_plan(layout, PlanOptions(hosts=cluster.addresses))
        cluster.entry_url = plan.process(plan.entry).url or ""
        groups: list[tuple[Layout, Sequence[Node]]] = [(layout, nodes)]
        if ref_layout is not None:
            first = 2 + len(nodes)
            cluster.reference = _layout_nodes(
                root, ref_layout, prefix, first, "reference", faults=HEALTHY
            )
            ref_plan = build_plan(ref_layout, PlanOptions(hosts=(cluster.reference[0].address,)))
            cluster.reference_url = ref_plan.process(ref_plan.entry).url
            groups.append((ref_layout, cluster.reference))
        yield _Prepared(root, bin_dir, cluster, groups)
    finally:
        held.close()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def dry_cluster(
    name: str,
    *,
    speed: float | None = None,
    catalog: str | None = None,
    ready_timeout_s: float = 180.0,
    reference: bool = True,
    keep: bool = False,
    faults: Faults = HEALTHY,
    preflight: bool = True,
) -> Iterator[DryCluster]:
    """Render, write the rank table, start every node under dash, wait; tear down on exit.

    ``faults``: what the nodes' preflight finds wrong (it then stops the launch: use
    :func:`refused_cluster`); ``preflight=False``: the nodes run with ``PREFLIGHT=0``."""
    with _prepared(name, catalog, reference, faults, keep, preflight=preflight) as ready:
        cluster, root = ready.cluster, ready.root
        every = [*cluster.nodes, *cluster.reference]
        started = time.perf_counter()
        try:
            for node in every:
                _start(root, node, speed, ready.bin_dir)
            targets = [t for layout_, nodes_ in ready.groups for t in _urls(layout_, nodes_)]
            wait_ready(targets, every, ready_timeout_s, root / "logs")
            cluster.started_s = time.perf_counter() - started
            yield cluster
        finally:
            stop_nodes([*cluster.reference, *cluster.nodes])


def refused_cluster(
    name: str,
    faults: Faults,
    *,
    catalog: str | None = None,
    timeout_s: float = 120.0,
) -> list[NodeOutcome]:
    """Start every node of ``name`` with ``faults`` injected and wait until every entry has
    stopped (the preflight refusing the launch): each node's exit status, output and the
    process logs its entry started (none, when the preflight stopped it in time)."""
    with _prepared(name, catalog, False, faults, keep=False) as ready:
        nodes = ready.cluster.nodes
        try:
            for node in nodes:
                _start(ready.root, node, None, ready.bin_dir)
            return wait_exits(nodes, timeout_s, ready.root / "logs")
        finally:
            stop_nodes(nodes)
