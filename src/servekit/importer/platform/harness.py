"""A fake ModelArts platform: run a node's launch entry here and record what it starts.

On the real platform every node runs the same entry script; it waits for the rank
table (``$RANK_TABLE_FILE``), finds itself in it by ``hostname`` (the pod name) or
``hostname -I``, resolves its NIC with ``ifconfig`` (or ``ip``), and finally execs
``vllm serve ...`` and ``python3 $PROXY_SCRIPT ...``. This module builds all of
that in a temp folder:

- a real ``global_rank_table.json`` (``status``, ``server_group_list`` with
  ``server_ip`` and ``pod_name``; group sizes configurable, group 0 first);
- ``bin/`` placed first on ``PATH``: fake ``hostname``, ``ifconfig``, ``ip`` and
  ``sysctl`` (``bin/`` beside this module, reading ``FAKEPLATFORM_POD/IP/NIC``) and
  a recording ``vllm`` (``recorder.py``);
- a recording proxy script for ``PROXY_SCRIPT``;

and runs one node's entry (``dash ENTRY`` by default) under a minimal, explicit
environment, waiting for it and everything it started, then returns the records.
``start_node`` takes a ``wrap`` that turns the node's command into another one:
``servekit.importer.contain`` uses it to run a folder's scripts in a sandbox; the
rendered servekit entries the render tests run are servekit's own and run as is.
Values are distinctive on purpose (pods ``fake-pod-<k>``, IPs ``10.88.0.<k+1>``,
NICs ``fakenic<k>``, inherited ``LD_PRELOAD=/inherited/preload``) so the
normalizer can turn them back into placeholders.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servekit.catalog import MAX_NODES
from servekit.importer.platform.normalize import (
    Placeholders,
    ProcessFacts,
    env_changes,
    node_placeholders,
    process_facts,
)
from servekit.procgroup import signal_group, start_detached, stop_groups
from servekit.vocabulary import atomic_write_text

HERE = Path(__file__).resolve().parent
FAKE_TOOLS = ("hostname", "ifconfig", "ip", "sysctl")
RECORDER = HERE / "recorder.py"
REAPER = HERE / "reaper.py"
MAX_OUTPUT = 64 * 1024
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Where ModelArts puts things on a node (docs/importer.md "What the platform provides"
# names the source of each). A sandboxed run (``at_platform_paths``) sees them there.
PLATFORM_RANK_TABLE = "/user/global/config/global_rank_table.json"
PLATFORM_HOME = "/root"
PLATFORM_SCRIPT_DIR = "/root/script"
PLATFORM_MODEL_DIR = "/root/model"
# The engine image's own files a folder may run: vllm-ascend's Dockerfile copies the
# repository to /vllm-workspace/vllm-ascend, with its PD proxy examples.
IMAGE_WORKSPACE = "/vllm-workspace"
IMAGE_PROXIES = tuple(
    f"vllm-ascend/examples/disaggregated_prefill_v1/{name}"
    for name in (
        "load_balance_proxy_server_example.py",
        "load_balance_proxy_layerwise_server_example.py",
    )
)
# Knobs servekit's own rendered entry reads; a run outside a sandbox (servekit's
# entries in the render tests) cannot put the table at its platform path and points
# at it with these instead. The platform itself sets none of them.
ENTRY_KNOBS = ("RANK_TABLE_FILE", "RANK_TABLE_TIMEOUT", "RANK_TABLE_INTERVAL", "ENV_LOG_FILE")

# Values every node inherits, so that what a script prepends or unsets is visible.
INHERITED: dict[str, str] = {
    "LD_PRELOAD": "/inherited/preload",
    "LD_LIBRARY_PATH": "/inherited/lib",
    "http_proxy": "http://inherited-proxy.invalid:3128",
    "https_proxy": "http://inherited-proxy.invalid:3128",
    "HTTP_PROXY": "http://inherited-proxy.invalid:3128",
    "HTTPS_PROXY": "http://inherited-proxy.invalid:3128",
}


Wrap = Callable[[int, list[str]], list[str]]


@dataclass(frozen=True)
class FakeNode:
    """One node as the rank table and the fake tools show it."""

    index: int
    pod: str
    ip: str
    nic: str


def fake_nodes(count: int) -> tuple[FakeNode, ...]:
    """``count`` nodes (any count a layout may have) with the standard distinctive values:
    ``10.88.0.1`` to ``10.88.0.250``, then on to ``10.88.1.1``."""
    if not 1 <= count <= MAX_NODES:
        raise ValueError(f"node count must be 1..{MAX_NODES}, got {count}")
    return tuple(
        FakeNode(k, f"fake-pod-{k}", f"10.88.{k // 250}.{k % 250 + 1}", f"fakenic{k}")
        for k in range(count)
    )


@dataclass(frozen=True)
class Record:
    """One process a node's entry started: a recorded ``vllm`` or proxy."""

    kind: str
    node: int
    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: str
    pid: int


@dataclass
class FakePlatform:
    """The files of a fake platform under ``root``; build it with ``create_platform``."""

    root: Path
    nodes: tuple[FakeNode, ...]
    group_sizes: tuple[int, ...]
    inherited: dict[str, str] = field(default_factory=lambda: dict(INHERITED))
    python: str = sys.executable
    devices_per_node: int = 0
    at_platform_paths: bool = False

    @property
    def reaper(self) -> Path:
        return self.root / "reaper.py"

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def record_dir(self) -> Path:
        return self.root / "records"

    @property
    def rank_table(self) -> Path:
        """The table's file here; a sandbox shows its folder at /user/global/config."""
        return self.root / "config" / "global_rank_table.json"

    @property
    def image_workspace(self) -> Path:
        """The image's /vllm-workspace (its proxy examples as recorders), shown read-only."""
        return self.root / "image" / "vllm-workspace"

    @property
    def model_dir(self) -> Path:
        """The (empty) model mount a sandbox shows read-only at /root/model."""
        return self.root / "model"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def start_dir(self) -> Path:
        """Where every entry starts (the platform's working directory)."""
        return self.root / "start"

    @property
    def proxy_script(self) -> Path:
        return self.root / "proxy_recorder.py"

    def node_dir(self, index: int) -> Path:
        return self.root / f"node{index}"

    def base_env(self, index: int) -> dict[str, str]:
        """The environment node ``index`` starts its entry with.

        At the platform's paths (a sandboxed run) it is what ModelArts gives a node
        and nothing more: the rank table is found at its path, not through a
        variable. Otherwise servekit's own entry is pointed at the table by its
        knobs (:data:`ENTRY_KNOBS`).
        """
        node = self.nodes[index]
        env = {
            "PATH": f"{self.bin_dir}:{SYSTEM_PATH}",
            "HOME": PLATFORM_HOME if self.at_platform_paths else str(self.home),
            "LANG": "C.UTF-8",
        }
        if not self.at_platform_paths:
            env |= {
                "RANK_TABLE_FILE": str(self.rank_table),
                "RANK_TABLE_TIMEOUT": "5",
                "RANK_TABLE_INTERVAL": "1",
                "ENV_LOG_FILE": str(self.node_dir(index) / "env.log"),
            }
            # The recording proxy for servekit's entries; the platform sets no
            # PROXY_SCRIPT, so a folder's script runs the proxy it names itself.
            env["PROXY_SCRIPT"] = str(self.proxy_script)
        env |= {
            "FAKEPLATFORM_NODE": str(index),
            "FAKEPLATFORM_RECORD_DIR": str(self.record_dir),
            "FAKEPLATFORM_POD": node.pod,
            "FAKEPLATFORM_IP": node.ip,
            "FAKEPLATFORM_NIC": node.nic,
        }
        env.update(self.inherited)
        return env

    def records(self, node: int | None = None) -> list[Record]:
        """Every process recorded so far (of one node if given), in a stable order."""
        paths = sorted(self.record_dir.glob("*.json"))[:MAX_RECORDS]
        found = [_read_record(p) for p in paths]
        chosen = [r for r in found if r is not None and (node is None or r.node == node)]
        return sorted(chosen, key=lambda r: (r.node, r.kind, r.argv))

    def exits(self) -> list[dict[str, Any]]:
        """Exit records written by processes that stayed alive until SIGTERM."""
        return [json.loads(p.read_text()) for p in sorted(self.record_dir.glob("*.exit.json"))]


MAX_RECORD_BYTES = 4 * 1024 * 1024
MAX_RECORDS = 4096


def _read_record(path: Path) -> Record | None:
    """One record; a folder's script may have planted anything there (bounded, no links)."""
    if path.name.endswith(".exit.json"):
        return None
    raw = read_small(path, MAX_RECORD_BYTES + 1)
    try:
        data = json.loads(raw) if raw is not None and len(raw) <= MAX_RECORD_BYTES else None
        if not isinstance(data, dict):
            return None
        return Record(
            kind=str(data["kind"]),
            node=int(data["node"]),
            argv=tuple(str(a) for a in data["argv"]),
            env={str(k): str(v) for k, v in dict(data["env"]).items()},
            cwd=str(data["cwd"]),
            pid=int(data["pid"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


def _open_regular(path: Path) -> int | None:
    """A read-only descriptor of ``path`` if it is a regular file, else None.

    Everything under the platform folder was writable inside the sandbox: a script
    may have put a link to a host file there, or a FIFO that would block a plain
    ``open``. ``O_NOFOLLOW`` refuses the link, ``O_NONBLOCK`` the wait for a writer,
    and ``fstat`` of the opened descriptor (not of the path, which may change) the
    rest.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        regular = False
    if not regular:
        os.close(fd)
        return None
    return fd


def read_small(path: Path, limit: int) -> bytes | None:
    """At most ``limit`` bytes of a regular file, never through a link nor blocked by a
    FIFO (None when it cannot be read)."""
    fd = _open_regular(path)
    if fd is None:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def devices(count: int) -> list[dict[str, str]]:
    """The NPUs of one server in the rank table: ``count`` (A2: 8, A3: 16), numbered per
    server, with the keys of a real ModelArts table (template/fixtures in the source)."""
    return [
        {"device_id": str(d), "device_logical_id": str(d), "rank_id": str(d)} for d in range(count)
    ]


RankServer = tuple[str, str]
"""One server of the rank table: its ``server_ip`` and its ``pod_name``."""


def rank_table(
    servers: Sequence[RankServer],
    group_sizes: Sequence[int],
    status: str = "completed",
    devices_per_node: int = 0,
) -> dict[str, Any]:
    """A ModelArts ``global_rank_table.json`` document: groups in order, group 0 first.

    The one writer of the table (the importer's fake platform and the dry-run
    clusters both write it so). The keys are those of a real table (the source's
    ``template/fixtures/global_rank_table-a3-2nodes.json``): ``server_group_count``,
    ``group_id``, ``server_id`` beside ``server_ip`` (a different address there too).
    """
    if sum(group_sizes) != len(servers) or any(size < 1 for size in group_sizes):
        raise ValueError(f"group sizes {list(group_sizes)} do not split {len(servers)} nodes")
    groups: list[dict[str, Any]] = []
    start = 0
    for g, size in enumerate(group_sizes):
        listed = [
            {
                "server_id": ip.replace("10.88.", "10.87.", 1),
                "server_ip": ip,
                "pod_name": pod,
                "device": devices(devices_per_node),
            }
            for ip, pod in servers[start : start + size]
        ]
        groups.append({"group_id": str(g), "server_count": str(size), "server_list": listed})
        start += size
    return {
        "version": "1.0",
        "status": status,
        "server_group_count": str(len(groups)),
        "server_group_list": groups,
    }


def write_rank_table_file(
    path: Path,
    servers: Sequence[RankServer],
    group_sizes: Sequence[int],
    status: str = "completed",
    devices_per_node: int = 0,
) -> None:
    """Write (or rewrite) a rank table at ``path``, atomically: the entry polling it
    never reads half a file."""
    doc = rank_table(servers, group_sizes, status, devices_per_node)
    atomic_write_text(path, json.dumps(doc, indent=2))


def write_rank_table(platform: FakePlatform, status: str = "completed") -> None:
    """(Re)write the platform's rank table, e.g. to flip it to ``completed`` later."""
    servers = [(n.ip, n.pod) for n in platform.nodes]
    write_rank_table_file(
        platform.rank_table, servers, platform.group_sizes, status, platform.devices_per_node
    )


def default_groups(count: int, group0: int = 1) -> tuple[int, ...]:
    """Group 0 of ``group0`` nodes, the rest in group 1."""
    return (group0,) if count == group0 else (group0, count - group0)


def create_platform(
    root: Path,
    nodes: int | Sequence[FakeNode],
    group_sizes: Sequence[int] | None = None,
    *,
    status: str = "completed",
    inherited: Mapping[str, str] | None = None,
    python: str = sys.executable,
    devices_per_node: int = 0,
    at_platform_paths: bool = False,
) -> FakePlatform:
    """Lay out a fake platform in the empty or missing folder ``root``.

    ``python`` runs the reaper and the recorders (standard library only): a
    sandbox that cannot see this interpreter passes the system's.
    ``devices_per_node`` NPUs are listed per server in the rank table (A2: 8, A3: 16).
    ``at_platform_paths``: the run is sandboxed and sees the rank table, home and
    model mount where ModelArts puts them (``base_env`` then sets no knob).
    """
    node_list = fake_nodes(nodes) if isinstance(nodes, int) else tuple(nodes)
    sizes = tuple(group_sizes) if group_sizes is not None else default_groups(len(node_list))
    platform = FakePlatform(
        root.resolve(),
        node_list,
        sizes,
        python=python,
        devices_per_node=devices_per_node,
        at_platform_paths=at_platform_paths,
    )
    if inherited is not None:
        platform.inherited = dict(inherited)
    folders = (platform.bin_dir, platform.record_dir, platform.home, platform.start_dir)
    for folder in (*folders, platform.model_dir):
        folder.mkdir(parents=True, exist_ok=True)
    platform.rank_table.parent.mkdir(parents=True, exist_ok=True)
    for k in range(len(node_list)):
        platform.node_dir(k).mkdir(exist_ok=True)
    for tool in FAKE_TOOLS:
        shutil.copy2(HERE / "bin" / tool, platform.bin_dir / tool)
        (platform.bin_dir / tool).chmod(0o755)
    install_recorder(platform.bin_dir / "vllm", python, executable=True)
    install_recorder(platform.proxy_script, python, executable=False)
    if at_platform_paths:
        install_python_shim(platform)
        for rel in IMAGE_PROXIES:
            target = platform.image_workspace / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            install_recorder(target, python, executable=False)
    shutil.copyfile(REAPER, platform.reaper)
    write_rank_table(platform, status)
    return platform


PYTHON_SHIM = """#!/bin/sh
# python3 of the fake platform: a script a folder runs by a path the node does not
# have (a proxy the folder calls but does not ship) is recorded from its command
# line; anything else runs on the real interpreter.
case "${1:-}" in
    *.py) [ -e "$1" ] || exec @PYTHON@ -IS @RECORDER@ --missing "$0" "$@" ;;
esac
exec @REAL@ "$@"
"""


def install_python_shim(platform: FakePlatform) -> None:
    """``python3`` and ``python`` first on PATH: record a missing script, run the rest."""
    real = shutil.which("python3", path=SYSTEM_PATH) or "/usr/bin/python3"
    recorder = platform.root / "missing_recorder.py"
    install_recorder(recorder, platform.python, executable=False)
    body = (
        PYTHON_SHIM.replace("@PYTHON@", platform.python)
        .replace("@RECORDER@", str(recorder))
        .replace("@REAL@", real)
    )
    for name in ("python3", "python"):
        target = platform.bin_dir / name
        target.write_text(body)
        target.chmod(0o755)


def install_recorder(target: Path, python: str = sys.executable, *, executable: bool) -> None:
    """Write the recorder to ``target``, run by ``python`` (isolated, no site)."""
    body = RECORDER.read_text()
    target.write_text(f"#!{python} -IS\n{body}")
    target.chmod(0o755 if executable else 0o644)


@dataclass
class NodeRun:
    """What running one node's entry gave: status, output and the recorded processes."""

    node: int
    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str
    records: list[Record]
    env: dict[str, str] = field(default_factory=dict)
    stopped: str | None = None  # why the run's watch killed every node, if it did


@dataclass(eq=False)
class NodeProcess:
    """A node's entry running under the reaper, in its own session."""

    platform: FakePlatform
    index: int
    popen: subprocess.Popen[bytes]
    env: dict[str, str]

    def terminate(self) -> None:
        """SIGTERM the node's whole process group (the reaper forwards and reaps)."""
        if self.popen.poll() is None:
            signal_group(self.popen.pid, signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the node's whole process group and wait until it is gone."""
        signal_group(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5.0)
        _wait_group_gone(self.popen.pid)

    def wait(self, timeout: float = 60.0) -> NodeRun:
        """Wait for the entry and all it started; kill the group if ``timeout`` passes."""
        timed_out = False
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            signal_group(self.popen.pid, signal.SIGKILL)
            self.popen.wait()
        _wait_group_gone(self.popen.pid)
        folder = self.platform.node_dir(self.index)
        return NodeRun(
            node=self.index,
            returncode=None if timed_out else self.popen.returncode,
            timed_out=timed_out,
            stdout=read_tail(folder / "stdout"),
            stderr=read_tail(folder / "stderr"),
            records=self.platform.records(self.index),
            env=self.env,
        )


def read_tail(path: Path, limit: int = MAX_OUTPUT) -> str:
    """The last ``limit`` bytes of a node's output file (a script may print without end).

    Only a regular file, never through a link (:func:`_open_regular`): the file was
    the sandbox's to replace.
    """
    fd = _open_regular(path)
    if fd is None:
        return ""
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, limit, max(0, size - limit)).decode(errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def _wait_group_gone(pgid: int, limit: float = 5.0) -> None:
    """After the reaper exits, give stragglers of its group a moment, then kill them."""
    stop_groups([pgid], grace_s=limit, term=False)


def start_node(
    platform: FakePlatform,
    index: int,
    entry: Path,
    *,
    shell: str = "dash",
    args: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
    wrap: Wrap | None = None,
) -> NodeProcess:
    """Start node ``index``'s entry (``SHELL ENTRY ARGS...``) from the platform's start dir.

    ``wrap(index, argv)`` gives the command that runs ``argv`` (a sandbox around it).
    """
    env = platform.base_env(index)
    env.update(extra_env or {})
    folder = platform.node_dir(index)
    argv = [platform.python, "-IS", str(platform.reaper), shell, str(entry), *args]
    if wrap is not None:
        argv = wrap(index, argv)
    with (folder / "stdout").open("wb") as out, (folder / "stderr").open("wb") as err:
        popen = start_detached(argv, stdout=out, stderr=err, env=env, cwd=platform.start_dir)
    return NodeProcess(platform, index, popen, env)


def run_node(
    platform: FakePlatform,
    index: int,
    entry: Path,
    *,
    shell: str = "dash",
    args: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    wrap: Wrap | None = None,
) -> NodeRun:
    """Run node ``index``'s entry to the end and return its records."""
    process = start_node(
        platform, index, entry, shell=shell, args=args, extra_env=extra_env, wrap=wrap
    )
    return process.wait(timeout)


WATCH_POLL_S = 0.05
Watch = Callable[[], str | None]


def run_all_nodes(
    platform: FakePlatform,
    entry: Path,
    *,
    shell: str = "dash",
    extra_env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    wrap: Wrap | None = None,
    watch: Watch | None = None,
) -> list[NodeRun]:
    """Run every node's entry side by side, as the platform does, and wait for all.

    ``timeout`` bounds the whole run (one deadline for all nodes), not each node.
    ``watch`` is called while the nodes run; the first reason it gives (a bound
    the sandboxes passed together, such as the disk they filled) kills every node
    and is each run's ``stopped``.
    """
    started: list[NodeProcess] = []
    try:
        for k in range(len(platform.nodes)):
            started.append(
                start_node(platform, k, entry, shell=shell, extra_env=extra_env, wrap=wrap)
            )
        deadline = time.monotonic() + timeout
        stopped = _watch_until_done(started, deadline, watch)
        if stopped is not None:
            for process in started:
                process.kill()
        runs = [process.wait(max(0.0, deadline - time.monotonic())) for process in started]
    except BaseException:
        # Ctrl-C or SIGTERM (turned into an exception by the caller): no node outlives
        # the run, so the caller's cleanup removes a folder nothing writes to any more.
        for process in started:
            process.kill()
        raise
    for run in runs:
        run.stopped = stopped
    return runs


def _watch_until_done(
    started: Sequence[NodeProcess], deadline: float, watch: Watch | None
) -> str | None:
    """Call ``watch`` until every node's entry ended or the deadline passed."""
    if watch is None:
        return None
    while time.monotonic() < deadline:
        if (stopped := watch()) is not None:
            return stopped
        if all(process.popen.poll() is not None for process in started):
            return watch()
        time.sleep(WATCH_POLL_S)
    return None


def platform_placeholders(platform: FakePlatform) -> Placeholders:
    """The fake platform's machine-dependent values and their placeholders."""
    extra = [(node.pod, f"{{NODE{node.index}_POD}}") for node in platform.nodes]
    extra += [(str(platform.proxy_script), "{PROXY_SCRIPT}"), (str(platform.root), "{PLATFORM}")]
    return Placeholders(
        literals=node_placeholders(
            [n.ip for n in platform.nodes], [n.nic for n in platform.nodes], extra
        ),
        inherited={name: (value,) for name, value in platform.inherited.items()},
        start_dir=str(platform.start_dir),
    )


def record_facts(
    platform: FakePlatform, record: Record, base: Mapping[str, str] | None = None
) -> ProcessFacts:
    """The normalized facts of one recorded process, its env relative to ``base``
    (default: the node's ``base_env``)."""
    start = platform.base_env(record.node) if base is None else base
    return process_facts(
        node=record.node,
        kind=record.kind,
        argv=record.argv,
        env=env_changes(record.env, start),
        cwd=record.cwd,
        placeholders=platform_placeholders(platform),
    )


def run_facts(platform: FakePlatform, run: NodeRun) -> list[ProcessFacts]:
    """The normalized facts of every process a node run recorded."""
    return [record_facts(platform, r, run.env) for r in run.records]
