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
4. wait until every engine and the proxy answer ``/health``.

:func:`dry_cluster` does all of that and tears it down (every process group
stopped, the temporary folder removed). The layout's reference layout
(``verify.reference``), when it has one, is started the same way on the next
address, so ``verify --reference URL`` can compare PD with a single instance.
``servekit verify NAME --target URL --nodes ... --logs DIR`` then checks the
cluster as it would a real one. ``benchmarks/cluster_dryrun.py`` times it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import servekit
from servekit.catalog import Layout, load
from servekit.client import ReadyTarget, poll_ready
from servekit.errors import UsageError
from servekit.local import port_is_free
from servekit.render import PlanOptions, build_plan, write_rendering

VLLM_WRAPPER = (
    '#!/bin/sh\n[ "$1" = serve ] && shift\nPYTHONPATH={code}${{PYTHONPATH:+:$PYTHONPATH}}\n'
    'export PYTHONPATH\nexec {python} -m servekit.sim serve "$@"\n'
)
"""The simulated ``vllm``: the servekit doing the dry run (its own code first on the path,
whatever an editable install elsewhere points at), so the engines are this code's."""
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STOP_TIMEOUT_S = 20.0
POLL_S = 0.25


@dataclass
class Node:
    """One dry-run node: its pod name, loopback address and running entry."""

    pod: str
    address: str
    entry: Path
    popen: subprocess.Popen[bytes] | None = None

    @property
    def output(self) -> Path:
        return self.entry.parent.parent / f"{self.pod}.out"


@dataclass
class DryCluster:
    """A running dry-run cluster: what ``verify --target --nodes --logs`` needs."""

    layout: str
    root: Path
    nodes: list[Node]
    entry_url: str
    logs: Path
    reference_url: str | None = None
    reference: list[Node] = field(default_factory=list)
    started_s: float = 0.0

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(n.address for n in self.nodes)

    def verify_args(self) -> list[str]:
        """The ``servekit verify NAME ...`` arguments that check this cluster."""
        args = [self.layout, "--target", self.entry_url, "--nodes", ",".join(self.addresses)]
        args += ["--logs", str(self.logs)]
        return args + (["--reference", self.reference_url] if self.reference_url else [])


def rank_table(nodes: Sequence[Node], group0: int = 1) -> dict[str, object]:
    """A ModelArts global rank table: completed, group 0 first (``group0`` nodes)."""
    servers = [
        {"server_id": n.address, "server_ip": n.address, "pod_name": n.pod, "device": []}
        for n in nodes
    ]
    groups = [servers[:group0], servers[group0:]] if len(servers) > group0 else [servers]
    return {
        "status": "completed",
        "version": "1.0",
        "group_count": str(len(groups)),
        "server_group_list": [
            {"group_name": f"group{g}", "server_count": str(len(s)), "server_list": s}
            for g, s in enumerate(groups)
        ],
    }


def free_block(layouts: Sequence[Layout], first: int = 2) -> str:
    """A ``127.0.N`` prefix on which every planned (address, port) is free.

    127.0.0.2, 127.0.0.3, ... when they are free (the usual case); another
    loopback /24 when something else holds one of the ports there.
    """
    needed = sum(layout.nodes for layout in layouts)
    for block in range(0, 32):
        prefix = f"127.0.{block}"
        rank = first
        ok = True
        for layout in layouts:
            plan = build_plan(layout)
            for proc in plan.processes:
                for port in proc.bound_ports():
                    ok = ok and port_is_free(port, f"{prefix}.{rank + proc.node}", reuse=True)
            rank += layout.nodes
        if ok and first + needed <= 255:
            return prefix
    raise UsageError("no loopback block 127.0.0-31.x has the layout's ports free")


def _env(root: Path, node: Node, speed: float | None, bin_dir: Path) -> dict[str, str]:
    python_dir = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{bin_dir}:{python_dir}:{SYSTEM_PATH}",
        "HOME": str(root / "home"),
        "LANG": "C.UTF-8",
        "TMPDIR": str(root / "tmp"),
        "RANK_TABLE_FILE": str(root / "config" / "global_rank_table.json"),
        "RANK_TABLE_TIMEOUT": "30",
        "RANK_TABLE_INTERVAL": "1",
        "NODE_POD_NAME": node.pod,
        "BIND_HOST": node.address,
        "NODE_NIC": "lo",
        "WORK_DIR": str(root / "work" / node.pod),
        "LOG_DIR": str(root / "logs"),
        "STOP_TIMEOUT": "10",
    }
    if speed is not None:
        env["SERVEKIT_SIM_SPEED"] = f"{speed:g}"
    return env


def _start(root: Path, node: Node, speed: float | None, bin_dir: Path) -> None:
    with node.output.open("wb") as out:
        node.popen = subprocess.Popen(
            ["dash", str(node.entry)],
            env=_env(root, node, speed, bin_dir),
            cwd=root / "start",
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _layout_nodes(root: Path, layout: Layout, prefix: str, first: int, tag: str) -> list[Node]:
    folder = root / tag
    write_rendering(build_plan(layout), folder / "script", "modelarts")
    return [
        Node(f"{tag}-node{i}", f"{prefix}.{first + i}", folder / "script" / "run.sh")
        for i in range(layout.nodes)
    ]


def _urls(layout: Layout, nodes: Sequence[Node]) -> list[tuple[str, dict[str, int]]]:
    """Each API server's URL and, for the proxy, the backend counts it must report."""
    plan = build_plan(layout, PlanOptions(hosts=tuple(n.address for n in nodes)))
    return [
        (p.url, p.proxy.backend_counts() if p.proxy else {})
        for p in plan.api_processes()
        if p.url is not None
    ]


def wait_ready(groups: Sequence[tuple[Layout, Sequence[Node]]], timeout_s: float) -> None:
    """Until every API server answers /health 200 and the proxy sees every backend."""
    targets = [
        ReadyTarget(url, url, None, tuple(sorted(counts.items())))
        for layout, nodes in groups
        for url, counts in _urls(layout, nodes)
    ]

    def exited() -> None:
        for _, nodes in groups:
            for node in nodes:
                if node.popen is not None and node.popen.poll() is not None:
                    tail = node.output.read_text(errors="replace")[-1500:]
                    raise RuntimeError(f"{node.pod} exited with {node.popen.returncode}:\n{tail}")

    pending = poll_ready(targets, timeout_s, check=exited, poll_s=POLL_S)
    if pending:
        names = ", ".join(t.url for t, _ in pending[:5])
        raise RuntimeError(f"not ready after {timeout_s:.0f} s: {names}")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_nodes(nodes: Sequence[Node], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM every entry (each stops its processes), then their groups; SIGKILL what is left.

    Every node is signalled first and waited for together, as a platform stops
    a job's pods, so the teardown takes one node's time, not the sum.
    """
    running = [n.popen for n in nodes if n.popen is not None]
    for popen in running:
        with contextlib.suppress(ProcessLookupError):
            popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for popen in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(max(0.1, deadline - time.monotonic()))
    for signum in (signal.SIGTERM, signal.SIGKILL):
        until = time.monotonic() + 5.0
        while any(_group_alive(p.pid) for p in running) and time.monotonic() < until:
            for popen in running:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signum)
            time.sleep(0.1)
    for popen in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(5)


def leftovers(cluster: DryCluster) -> list[int]:
    """Process groups of the cluster that still have a process (empty after teardown)."""
    nodes = [*cluster.nodes, *cluster.reference]
    return [n.popen.pid for n in nodes if n.popen is not None and _group_alive(n.popen.pid)]


@contextlib.contextmanager
def dry_cluster(
    name: str,
    *,
    speed: float | None = None,
    catalog: str | None = None,
    ready_timeout_s: float = 180.0,
    reference: bool = True,
    keep: bool = False,
) -> Iterator[DryCluster]:
    """Render, write the rank table, start every node under dash, wait; tear down on exit."""
    if shutil.which("dash") is None:
        raise UsageError(
            "dash is not installed; the dry run runs run.sh under dash (apt install dash)"
        )
    layout = load(name, catalog).layout
    ref_name = layout.verify.reference if reference else None
    ref_layout = load(ref_name, catalog).layout if ref_name else None
    root = Path(tempfile.mkdtemp(prefix="servekit-dryrun-"))
    try:
        for sub in ("bin", "config", "home", "tmp", "start", "logs", "work"):
            (root / sub).mkdir()
        bin_dir = root / "bin"
        code = shlex.quote(str(Path(servekit.__file__).resolve().parent.parent))
        wrapper = VLLM_WRAPPER.format(python=shlex.quote(sys.executable), code=code)
        (bin_dir / "vllm").write_text(wrapper)
        (bin_dir / "vllm").chmod(0o755)
        prefix = free_block([x for x in (layout, ref_layout) if x is not None])
        nodes = _layout_nodes(root, layout, prefix, 2, "cluster")
        table = json.dumps(rank_table(nodes), indent=2)
        (root / "config" / "global_rank_table.json").write_text(table)
        cluster = DryCluster(name, root, nodes, "", root / "logs")
        plan = build_plan(layout, PlanOptions(hosts=cluster.addresses))
        cluster.entry_url = plan.process(plan.entry).url or ""
        groups: list[tuple[Layout, Sequence[Node]]] = [(layout, nodes)]
        if ref_layout is not None:
            cluster.reference = _layout_nodes(root, ref_layout, prefix, 2 + len(nodes), "reference")
            ref_plan = build_plan(ref_layout, PlanOptions(hosts=(cluster.reference[0].address,)))
            cluster.reference_url = ref_plan.process(ref_plan.entry).url
            groups.append((ref_layout, cluster.reference))
        started = time.perf_counter()
        try:
            for node in [*nodes, *cluster.reference]:
                _start(root, node, speed, bin_dir)
            wait_ready(groups, ready_timeout_s)
            cluster.started_s = time.perf_counter() - started
            yield cluster
        finally:
            stop_nodes([*cluster.reference, *nodes])
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
