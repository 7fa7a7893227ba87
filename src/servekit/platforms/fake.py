"""What every fake platform for dry runs shares: loopback nodes, the simulated vllm, teardown.

A dry run starts a platform's own rendered entry (ModelArts ``run.sh``, a
Kubernetes pod's ``pod.sh``) once per node or pod, each on its own loopback
address (127.0.0.2, 127.0.0.3, ...), with ``servekit sim serve`` standing in for
``vllm`` (:data:`VLLM_WRAPPER`), waits until every API server answers
``/health``, and stops every process group at the end. The platform folders
(``modelarts/fake.py``, ``k8s/fake.py``) add what their platform injects.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import servekit
from servekit.catalog import Layout
from servekit.client import ReadyTarget, poll_ready
from servekit.errors import UsageError
from servekit.local import port_is_free
from servekit.procgroup import group_alive, stop_groups
from servekit.render import build_plan

VLLM_WRAPPER = (
    '#!/bin/sh\n[ "$1" = serve ] && shift\nPYTHONPATH={code}${{PYTHONPATH:+:$PYTHONPATH}}\n'
    'export PYTHONPATH\nexec {python} -m servekit.sim serve "$@"\n'
)
"""The simulated ``vllm``: the servekit doing the dry run (its own code first on the path,
whatever an editable install elsewhere points at), so the engines are this code's."""
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STOP_TIMEOUT_S = 20.0
GROUP_GRACE_S = 5.0  # after the entries: their groups' stragglers, then SIGKILL
POLL_S = 0.25


@dataclass
class Node:
    """One dry-run node (or pod): its name, loopback address, running entry, and what its
    platform adds to its environment (its filesystem and NPU fabric: ``fakenpu``)."""

    pod: str
    address: str
    entry: Path
    popen: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)

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


def node_env(
    root: Path,
    name: str,
    address: str,
    *,
    speed: float | None,
    bin_dir: Path,
    platform: Mapping[str, str],
) -> dict[str, str]:
    """What every fake node or pod starts with, then what its ``platform`` injects.

    The simulated ``vllm`` first on the PATH, this interpreter next; a home, temp,
    work and log folder under the dry run's ``root``; the node's own loopback
    address to bind; the folder its simulated engines share the prompts they answered
    through (a stream migrated to another engine process goes on with the rest of its
    answer: ``servekit.sim.resume``); and the simulator's speed, when asked for, over
    everything.
    """
    env = {
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{SYSTEM_PATH}",
        "HOME": str(root / "home"),
        "LANG": "C.UTF-8",
        "TMPDIR": str(root / "tmp"),
        "BIND_HOST": address,
        "NODE_NIC": "lo",
        "WORK_DIR": str(root / "work" / name),
        "LOG_DIR": str(root / "logs"),
        "SERVEKIT_SIM_TRANSCRIPTS": str(root / "sim-transcripts"),
        **platform,
    }
    if speed is not None:
        env["SERVEKIT_SIM_SPEED"] = f"{speed:g}"
    return env


def simulated_vllm(bin_dir: Path) -> None:
    """Write the ``vllm`` that runs this servekit's simulator into ``bin_dir``."""
    code = shlex.quote(str(Path(servekit.__file__).resolve().parent.parent))
    wrapper = VLLM_WRAPPER.format(python=shlex.quote(sys.executable), code=code)
    (bin_dir / "vllm").write_text(wrapper)
    (bin_dir / "vllm").chmod(0o755)


LOCK_DIR = Path("/tmp") if Path("/tmp").is_dir() else Path(tempfile.gettempdir())
"""Where the loopback blocks' lock files live: one fixed folder, whatever a run's TMPDIR,
so every servekit process on the machine sees the same locks."""
BLOCKS = 32


def _try_lock(block: int) -> int | None:
    """An open descriptor holding ``block``'s exclusive lock; None when another holds it."""
    path = LOCK_DIR / f"servekit-loopback-127.0.{block}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def loopback_block(is_free: Callable[[str], bool], what: str) -> Iterator[str]:
    """A ``127.0.N`` prefix held for this cluster's life, on which ``is_free(prefix)`` held.

    Checking the ports alone races: two dry runs at once (pytest-xdist workers, two
    terminals) both see 127.0.0.x free and the second one's proxy finds its port
    taken. Each block is taken under an exclusive ``flock`` first, held until the
    cluster stops, so no two servekit clusters on a machine share a block; the port
    check then skips a block that something else (not servekit) holds.
    """
    for block in range(BLOCKS):
        fd = _try_lock(block)
        if fd is None:
            continue
        try:
            prefix = f"127.0.{block}"
            if is_free(prefix):
                yield prefix
                return
        finally:
            os.close(fd)
    raise UsageError(f"no loopback block 127.0.0-{BLOCKS - 1}.x has {what} free")


def layouts_are_free(
    layouts: Sequence[Layout], first: int = 2, extra_ports: Sequence[int] = ()
) -> Callable[[str], bool]:
    """Whether every planned (address, port) of ``layouts`` is free under a prefix, and
    ``extra_ports`` (the preflight's exchange) on every node.

    The nodes take 127.0.N.2, 127.0.N.3, ... in the order of ``layouts``.
    """
    needed = sum(layout.nodes for layout in layouts)
    plans = [(build_plan(layout), layout.nodes) for layout in layouts]

    def check(prefix: str) -> bool:
        if first + needed > 255:
            return False
        rank = first
        for plan, nodes in plans:
            for proc in plan.processes:
                for port in proc.bound_ports():
                    if not port_is_free(port, f"{prefix}.{rank + proc.node}", reuse=True):
                        return False
            for node in range(nodes):
                if not all(
                    port_is_free(p, f"{prefix}.{rank + node}", reuse=True) for p in extra_ports
                ):
                    return False
            rank += nodes
        return True

    return check


def _log_tails(logs: Path | None, count: int = 3, chars: int = 600) -> str:
    """The ends of the ``count`` newest process logs: why a process exited, before the
    dry run's folder (and with it the logs) is removed."""
    if logs is None or not logs.is_dir():
        return ""
    files = sorted(
        (f for f in logs.rglob("*.log") if f.is_file()),
        key=lambda f: f.stat().st_mtime,
        reverse=True,
    )[:count]
    return "".join(
        f"\n--- {f.relative_to(logs)} ---\n{f.read_bytes()[-chars:].decode(errors='replace')}"
        for f in files
    )


def wait_ready(
    targets: Sequence[tuple[str, dict[str, int]]],
    nodes: Sequence[Node],
    timeout_s: float,
    logs: Path | None = None,
) -> None:
    """Until every API server answers /health 200 and the proxy sees every backend."""
    ready = [ReadyTarget(url, url, None, tuple(sorted(counts.items()))) for url, counts in targets]

    def exited() -> None:
        for node in nodes:
            if node.popen is not None and node.popen.poll() is not None:
                tail = node.output.read_text(errors="replace")[-1500:]
                raise RuntimeError(
                    f"{node.pod} exited with {node.popen.returncode}:\n{tail}{_log_tails(logs)}"
                )

    pending = poll_ready(ready, timeout_s, check=exited, poll_s=POLL_S)
    if pending:
        names = ", ".join(t.url for t, _ in pending[:5])
        raise RuntimeError(f"not ready after {timeout_s:.0f} s: {names}")


@dataclass(frozen=True)
class NodeOutcome:
    """How a dry-run node's entry ended: its exit status, its output, the process logs it
    left (each process it started writes one) and whether it stopped by itself."""

    pod: str
    address: str
    returncode: int | None
    output: str
    started: tuple[str, ...]

    @property
    def refused(self) -> bool:
        """It stopped by itself with a failure, having started no process."""
        return self.returncode not in (None, 0) and not self.started


def wait_exits(nodes: Sequence[Node], timeout_s: float, logs: Path) -> list[NodeOutcome]:
    """Wait until every node's entry has stopped (or ``timeout_s``); what each one did."""
    deadline = time.monotonic() + timeout_s
    for node in nodes:
        if node.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.popen.wait(max(0.1, deadline - time.monotonic()))
    started = tuple(sorted(f.stem for f in logs.glob("*.log"))) if logs.is_dir() else ()
    return [
        NodeOutcome(
            node.pod,
            node.address,
            node.popen.poll() if node.popen is not None else None,
            node.output.read_text(errors="replace") if node.output.is_file() else "",
            started,
        )
        for node in nodes
    ]


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
    stop_groups([p.pid for p in running], grace_s=GROUP_GRACE_S)
    for popen in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(5)


def leftovers(cluster: DryCluster) -> list[int]:
    """Process groups of the cluster that still have a process (empty after teardown)."""
    nodes = [*cluster.nodes, *cluster.reference]
    return [n.popen.pid for n in nodes if n.popen is not None and group_alive(n.popen.pid)]
