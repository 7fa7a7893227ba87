"""Take a source-convention folder's facts by running every node rank of it, contained.

A folder of the source convention (``run.sh`` dispatching on the rank table or
``MASTER``, role scripts, ``launch_online_dp.py``, proxy scripts, ``meta.yaml``) is
run the way the platform runs it: the folder is copied to each node's
``/root/script``, every node rank runs ``dash /root/script/run.sh`` side by side
on the fake platform (:mod:`servekit.importer.platform`: a real rank table with
one group-0 node and 8 or 16 NPUs per server, fake
``hostname``/``ifconfig``/``ip``/``sysctl``, a recording ``vllm``, a recording
proxy at ``$PROXY_SCRIPT``, and the recorder in place of every ``*.py`` of the
folder but ``launch_online_dp.py``, so a proxy the scripts run by path, whatever
its name, is recorded too), each inside its bubblewrap sandbox
(:mod:`servekit.importer.contain`) under one wall-clock limit for the whole run.
The folder's own shell scripts, ``launch_online_dp.py`` and templates run
unchanged.

What comes back (:class:`FolderFacts`, ``.document()`` is the fidelity fixture
format of tests/render/fidelity/README.md plus ``nodes_from``,
``devices_per_node``, ``host_tuning``, ``meta`` and ``unexpressed``): every process
started, normalized (:mod:`servekit.importer.platform.normalize`); each write a
node made to its fake ``/proc/sys`` or ``/sys``; the folder's meta.yaml
(:func:`servekit.importer.meta.read_meta`). What needs the scripts' text too (the
node count, the file and line of a write, a double export) is
:mod:`servekit.importer.scan`. docs/importer.md has the whole picture.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from servekit.importer.contain import (
    ImportRefused,
    Limits,
    Sandbox,
    Write,
    breach,
    copy_proc_sys,
    sandbox_python,
    shown,
    status_breach,
    writes,
)
from servekit.importer.failures import last_error
from servekit.importer.meta import SourceMeta, read_meta
from servekit.importer.platform import fixture
from servekit.importer.platform.harness import (
    INHERITED,
    FakePlatform,
    NodeProcess,
    NodeRun,
    create_platform,
    default_groups,
    install_recorder,
    run_facts,
    start_node,
)
from servekit.importer.platform.normalize import ProcessFacts, sorted_facts
from servekit.importer.scan import (
    ENTRY,
    HostTuning,
    Unexpressed,
    double_exports,
    host_tuning,
    stated_nodes,
)
from servekit.importer.synthesize import HARDWARE
from servekit.importer.waits import Watch
from servekit.vocabulary import StrictModel

# Python files of a folder that run for real (the platform's DP launcher); every other
# one is replaced by the recorder.
RUN_AS_IS = frozenset({"launch_online_dp.py"})
SCRIPT_DIR = "/root/script"
EXECUTABLE_ASSUMPTION = (
    "*.sh made executable: role scripts are started with exec, and the platform's copy "
    "of the scripts folder is assumed to keep them executable"
)
PROXY_ASSUMPTION = (
    "the platform sets no PROXY_SCRIPT: a proxy runs from the path the folder's scripts "
    "name; one the folder calls but does not ship is recorded from its command line"
)
POLL_S = 0.25
MAX_FILES = 2000
MAX_HELPER_BYTES = 1024 * 1024
MAX_FOLDER_BYTES = 32 * 1024 * 1024


class SourceRef(StrictModel):
    """Where a folder comes from: repository, commit and the folder's path in it."""

    repo: str | None = None
    commit: str | None = None
    folder: str


class FolderFacts(StrictModel):
    """Everything a contained run of one folder observed; ``document()`` is the JSON."""

    source: SourceRef
    entry: str = ENTRY
    shell: str
    nodes: int
    nodes_from: str
    devices_per_node: int
    group0_size: int
    assumptions: tuple[str, ...]
    processes: tuple[dict[str, Any], ...]
    host_tuning: tuple[HostTuning, ...]
    meta: SourceMeta
    unexpressed: tuple[Unexpressed, ...]

    def process_facts(self) -> list[ProcessFacts]:
        return [ProcessFacts.from_json(p) for p in self.processes]

    def document(self) -> dict[str, Any]:
        """The facts document (fixture format, extended); ``fixture.dumps`` writes it."""
        placeholders = dict(fixture.PLACEHOLDERS)
        if any("/cpu*/" in t.path for t in self.host_tuning):
            placeholders["/cpu*/"] = "every CPU: the same value was written to each"
        return {
            "source": self.source.model_dump(),
            "entry": self.entry,
            "shell": self.shell,
            "nodes": self.nodes,
            "nodes_from": self.nodes_from,
            "devices_per_node": self.devices_per_node,
            "group0_size": self.group0_size,
            "assumptions": list(self.assumptions),
            "placeholders": placeholders,
            "processes": [dict(p) for p in self.processes],
            "host_tuning": [t.model_dump() for t in self.host_tuning],
            "meta": self.meta.document(),
            "unexpressed": [u.model_dump() for u in self.unexpressed],
        }


def detect_devices(folder: Path, source: SourceRef) -> int:
    """NPUs per node in the rank table: 8 on A2, 16 on A3, by the model folder's suffix
    (``glm5.2-a2``); 16 when the path names neither."""
    for name in (*Path(source.folder).parts[::-1], *folder.resolve().parts[::-1]):
        for hw, (_accelerator, count) in HARDWARE.items():
            if name.endswith(f"-{hw}") or name == hw:
                return count
    return HARDWARE["a3"][1]


def _check_folder(folder: Path, entry: str) -> None:
    try:
        is_dir = folder.is_dir()
        has_entry = "/" not in entry and entry not in ("", ".", "..") and (folder / entry).is_file()
    except OSError as exc:  # a name over 255 bytes, a loop of links
        raise ImportRefused(
            f"{shown(str(folder))}: cannot read ({exc.strerror}); give the layout folder"
        ) from None
    if not is_dir:
        raise ImportRefused(f"{folder}: not a folder; give the layout folder that holds {entry}")
    if not has_entry:
        raise ImportRefused(
            f"{folder}: no {entry}; give the script every node runs with --entry NAME"
        )


MAX_DEPTH = 32


def _walk(folder: Path) -> Iterator[tuple[str, list[str]]]:
    """(folder, its entries' names) top-down, without recursion, at most MAX_DEPTH deep.

    ``os.walk`` and ``shutil.copytree`` recurse: a folder 1,500 levels deep raised
    RecursionError. Links are not followed (they are copied as links).
    """
    stack = [(str(folder), 0)]
    while stack:
        top, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ImportRefused(
                f"{folder}: folders nested more than {MAX_DEPTH} deep; a layout folder is a "
                "few scripts"
            )
        try:
            with os.scandir(top) as found:
                entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in found]
        except OSError as exc:
            raise ImportRefused(f"{folder}: cannot read {shown(top)} ({exc.strerror})") from None
        yield top, [name for name, _ in entries]
        stack += [(os.path.join(top, name), depth + 1) for name, is_dir in entries if is_dir]


def _copy_folder(folder: Path, into: Path) -> None:
    """Copy the folder (symlinks as symlinks), bounded in files, bytes and depth."""
    count, size = 0, 0
    for top, names in _walk(folder):
        for name in names:
            count += 1
            try:
                info = os.lstat(os.path.join(top, name))
            except OSError as exc:
                raise ImportRefused(f"{folder}: cannot read {name} ({exc.strerror})") from None
            mode = info.st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                raise ImportRefused(
                    f"{folder}: {name} is not a regular file, folder or link (a FIFO or a "
                    "device would block the copy); remove it"
                )
            size += info.st_size if stat.S_ISREG(info.st_mode) else 0
        if count > MAX_FILES or size > MAX_FOLDER_BYTES:
            raise ImportRefused(
                f"{folder}: more than {MAX_FILES} files or {MAX_FOLDER_BYTES >> 20} MiB; "
                "a layout folder is a few scripts"
            )
    try:
        shutil.copytree(folder, into, symlinks=True)
    except (OSError, shutil.Error) as exc:
        raise ImportRefused(f"{folder}: cannot copy it ({exc}); check its permissions") from None
    for path in into.rglob("*.sh"):
        if path.is_file() and not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


_NETWORK_IMPORT = re.compile(
    rb"^\s*(?:import|from)\s+(?:aiohttp|fastapi|uvicorn|starlette|flask|httpx|requests|"
    rb"urllib\.request|urllib3|http\.server|http\.client|socket|socketserver|"
    rb"prometheus_client)\b",
    re.MULTILINE,
)


def serves_or_calls_the_network(path: Path) -> bool:
    """A helper that imports an HTTP or socket module: a proxy, a smoke test, an
    aggregator. The sandbox has no network, so it is recorded, not run."""
    try:
        with path.open("rb") as fh:
            return _NETWORK_IMPORT.search(fh.read(MAX_HELPER_BYTES)) is not None
    except OSError:
        return True


def _replace_helpers(copy: Path, python: str) -> list[str]:
    """Every ``*.py`` of the copy that serves or calls the network becomes the recorder;
    their names. Any other (a DP launcher, a Python launcher) runs for real.

    A proxy is recorded whatever it is named (the recorder tells a proxy by its name
    or its flags); any other helper is recorded as a ``script`` process.
    """
    replaced = []
    for path in sorted(copy.glob("*.py")):
        if (
            path.name not in RUN_AS_IS
            and path.is_file()
            and not path.is_symlink()
            and serves_or_calls_the_network(path)
        ):
            install_recorder(path, python, executable=False)
            replaced.append(path.name)
    return replaced


def _failure(run: NodeRun, noise: Sequence[str]) -> str:
    """The last error the node's own processes printed, as the refusal quotes it."""
    found = last_error(run.stderr, noise)
    return found.text() if found is not None else "it printed nothing on stderr"


def _check(
    name: str, entry: str, runs: Sequence[NodeRun], limit: float, noise: Sequence[str] = ()
) -> None:
    """Refuse a run whose nodes failed, each refusal in the folder's own words.

    ``noise``: the fake platform's own values (its inherited ``LD_PRELOAD``), whose
    complaints are not the folder's errors.
    """
    for run in runs:
        where = f"{name}: node {run.node}"
        if run.stopped is not None:
            raise ImportRefused(f"{name}: {run.stopped}")
        broken = [line for line in run.stderr.splitlines() if line.startswith("bwrap: ")]
        if broken:
            raise ImportRefused(
                f"{where}: bubblewrap could not build the sandbox ({shown(broken[0][7:])}); the "
                "importer needs unprivileged user namespaces (kernel.unprivileged_userns_clone, "
                "a container's seccomp profile)"
            )
        found = breach(run.stderr)
        if found is not None:
            what, line = found
            raise ImportRefused(f"{where} {what}: {line}")
        if run.timed_out:
            raise ImportRefused(
                f"{where} ran past the {limit:g}s time limit; its sandbox was killed "
                "(a script that never ends, or a process left running)"
            )
        if (stopped := status_breach(run.returncode)) is not None:
            raise ImportRefused(f"{where} {stopped} ({entry} exited {run.returncode}, SIGXFSZ)")
        if run.returncode != 0:
            raise ImportRefused(f"{where}: {entry} exited {run.returncode}: {_failure(run, noise)}")
        if not run.records:
            raise ImportRefused(
                f"{where}: {entry} ended without starting vllm or a proxy: {_failure(run, noise)}"
            )
    if not any(r.kind == "engine" for run in runs for r in run.records):
        started = sorted({f"node {r.node}: {r.kind}" for run in runs for r in run.records})
        failed = next((run for run in runs if last_error(run.stderr, noise)), runs[0])
        raise ImportRefused(
            f"{name}: no node started vllm ({', '.join(started)}); node {failed.node}: "
            f"{_failure(failed, noise)}"
        )


def _run_watched(
    platform: FakePlatform, folder: Path, entry: str, *, shell: str, limit: float, sandbox: Sandbox
) -> list[NodeRun]:
    """Every node side by side under one deadline and the import's shared bounds.

    A node waiting for what the platform never provides is refused at once
    (:mod:`servekit.importer.waits`); the disk the sandboxes fill together and
    their one memory group bound them all (the sandbox's ``disk`` watch and
    memory group); Ctrl-C or SIGTERM leaves no node running, so the caller's
    cleanup removes a folder nothing writes to any more.
    """
    path = Path(SCRIPT_DIR) / entry
    started: list[NodeProcess] = []
    sandbox.disk.mark()
    sandbox.open_memory_group()
    try:
        for k in range(len(platform.nodes)):
            started.append(start_node(platform, k, path, shell=shell, wrap=sandbox.wrap))
        deadline = time.monotonic() + limit
        stopped = _watch_nodes(started, folder, deadline, sandbox)
        if stopped is not None:
            for process in started:
                process.kill()
        runs = [process.wait(max(0.0, deadline - time.monotonic())) for process in started]
        for run in runs:
            run.stopped = stopped
        if (memory := sandbox.memory_breach()) is not None:
            raise ImportRefused(f"{folder}: a node {memory}")
        return runs
    except BaseException:
        for process in started:
            process.kill()
        raise
    finally:
        sandbox.close()


def _watch_nodes(
    started: list[NodeProcess], folder: Path, deadline: float, sandbox: Sandbox
) -> str | None:
    """Poll until every node ended or the deadline passed: the disk bound's reason if
    the sandboxes passed it together; a node waiting on what never comes is refused."""
    waits = Watch(started, folder)
    while time.monotonic() < deadline and any(p.popen.poll() is None for p in started):
        time.sleep(POLL_S)
        if (stopped := sandbox.disk()) is not None:
            return stopped
        if (what := waits.waiting()) is not None:
            for process in started:
                process.terminate()
            for process in started:
                process.wait(5.0)
            raise ImportRefused(f"{folder}: {what}")
    return None


PROBE_NODES = 8


def _contained(
    folder: Path,
    count: int,
    *,
    entry: str,
    shell: str,
    per_node: int,
    time_limit_s: float,
    check: bool = True,
) -> tuple[list[NodeRun], list[ProcessFacts], list[Write], list[str], int]:
    """Run ``entry`` on ``count`` sandboxed nodes: (runs, processes, writes, the helpers
    replaced by the recorder, group 0's size). ``check``: refuse a node that failed."""
    python = sandbox_python()
    limits = Limits(time_s=time_limit_s)
    with tempfile.TemporaryDirectory(prefix="servekit-import-", ignore_cleanup_errors=True) as tmp:
        scratch = Path(tmp)
        original = scratch / "folder"
        _copy_folder(folder, original)
        replaced = _replace_helpers(original, python)
        platform = create_platform(
            scratch / "platform",
            count,
            default_groups(count),
            python=python,
            devices_per_node=per_node,
            at_platform_paths=True,
        )
        template = scratch / "proc-sys-template"
        copy_proc_sys(template)
        sandbox = Sandbox(scratch, platform.root, limits)
        trees = []
        for node in platform.nodes:
            tree = sandbox.prepare(node.index, node.pod, template)
            shutil.copytree(original, tree.root / "script", symlinks=True)
            trees.append(tree)
        sandbox.hand_over()
        runs = _run_watched(
            platform, folder, entry, shell=shell, limit=time_limit_s, sandbox=sandbox
        )
        if check:
            _check(str(folder), entry, runs, time_limit_s, tuple(platform.inherited.values()))
        processes = [facts for run in runs for facts in run_facts(platform, run)]
        found = [w for node, tree in enumerate(trees) for w in writes(tree, node)]
        return runs, processes, found, replaced, platform.group_sizes[0]


def probe_nodes(
    folder: Path, *, entry: str, shell: str, per_node: int, time_limit_s: float
) -> tuple[int, str]:
    """The node count of a folder nothing says it of: run the entry on
    :data:`PROBE_NODES` nodes; the ranks it dispatches on are those that start something,
    0..N-1, while every rank from N fails or starts nothing."""
    runs, _processes, _found, _replaced, _group0 = _contained(
        folder,
        PROBE_NODES,
        entry=entry,
        shell=shell,
        per_node=per_node,
        time_limit_s=time_limit_s,
        check=False,
    )
    started = [bool(run.records) and run.returncode == 0 for run in runs]
    count = started.index(False) if False in started else PROBE_NODES
    if count in {0, PROBE_NODES} or any(started[count:]):
        seen = ", ".join(str(k) for k, ok in enumerate(started) if ok) or "none"
        why = f"; node 0: {_failure(runs[0], tuple(INHERITED.values()))}" if count == 0 else ""
        raise ImportRefused(
            f"{folder}: cannot tell its node count: run on {PROBE_NODES} nodes, ranks {seen} "
            f"started something (nothing in {entry}, meta.yaml or the folder name says it); "
            f"give --nodes N{why}"
        )
    return count, f"ran {entry} on {PROBE_NODES} nodes: ranks 0..{count - 1} start processes"


def extract_folder(
    folder: Path,
    *,
    nodes: int | None = None,
    source: SourceRef | None = None,
    shell: str = "dash",
    time_limit_s: float = 120.0,
    devices_per_node: int | None = None,
    entry: str = ENTRY,
) -> FolderFacts:
    """Run every node rank of ``folder`` in its sandbox and return what they started."""
    folder = Path(folder)
    _check_folder(folder, entry)
    meta = read_meta(folder)
    if shutil.which(shell) is None:
        raise ImportRefused(f"shell {shell!r} not found; install it (dash is Debian's)")
    ref = source or SourceRef(folder=folder.name)
    per_node = devices_per_node or detect_devices(folder, ref)
    stated = stated_nodes(folder, meta, nodes, entry)
    count, said = stated or probe_nodes(
        folder, entry=entry, shell=shell, per_node=per_node, time_limit_s=time_limit_s
    )
    _runs, processes, found, replaced, group0 = _contained(
        folder, count, entry=entry, shell=shell, per_node=per_node, time_limit_s=time_limit_s
    )
    assumptions = [EXECUTABLE_ASSUMPTION, PROXY_ASSUMPTION]
    if replaced:
        assumptions.append(
            f"the folder's Python helpers run as the recorder: {', '.join(replaced)}"
        )
    return FolderFacts(
        source=ref,
        entry=entry,
        shell=shell,
        nodes=count,
        nodes_from=said,
        devices_per_node=per_node,
        group0_size=group0,
        assumptions=tuple(assumptions),
        processes=tuple(p.to_json() for p in sorted_facts(processes)),
        host_tuning=tuple(host_tuning(folder, found)),
        meta=meta,
        unexpressed=tuple(double_exports(folder)),
    )
