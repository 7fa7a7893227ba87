"""Run a source folder's scripts in a bubblewrap sandbox, one per node.

A folder to import is someone else's shell: it may tune the host (cpufreq,
sysctl), write where it likes, open connections or never end. Each node's
command runs under Debian's ``bwrap`` (bubblewrap) so that none of that reaches
the host:

- no network (``--unshare-all``: net, pid, ipc, uts, cgroup and user
  namespaces), ``--die-with-parent`` and ``--new-session``, every capability
  dropped; as root the sandbox starts as ``nobody`` (uid 65534) mapped to uid 0
  inside, so the process limit (``RLIMIT_NPROC``, which the kernel never applies
  to root) holds and nothing inside has any right on the host's files;
- ``--ro-bind / /`` and ``/etc`` read-only; a fresh ``/dev`` and ``/proc``;
  ``/proc/sys`` and ``/sys`` bound separately to scratch fakes (as root,
  ``--proc /proc`` alone still lets a script write the host's ``/proc/sys``);
  ``/root`` (the platform's home, where scripts ``mkdir /root/kernel_cache`` and
  find ``/root/script``) and ``/tmp`` are scratch folders of that node; the
  platform folder (rank table, records, fake tools) is bound at its own path;
- limits: processes, file size (every file a script writes, its captured output
  included), address space and no core files, via ``prlimit``; the wall-clock
  limit of the whole run is the caller's (the harness kills the sandbox, and
  with it its pid namespace, when it passes).

Why bubblewrap: it needs no daemon and no image, builds the namespaces
unprivileged, and mounts read-only binds and scratch folders in one command
line that can be read and tested. ``unshare(1)`` would need the mounts scripted
by hand (and a mount script running as root is what is to be avoided);
firejail is setuid and profile-driven, nsjail is not packaged in Debian, and a
container engine (docker, podman) adds a daemon or an image store for what is a
few shell scripts. ``servekit.importer.platform.harness`` stays unaware of all
this: ``Sandbox.wrap`` is the ``wrap`` its ``start_node`` takes.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from servekit.errors import UsageError
from servekit.importer.platform.harness import (
    IMAGE_WORKSPACE,
    PLATFORM_MODEL_DIR,
    PLATFORM_RANK_TABLE,
    SYSTEM_PATH,
    read_small,
)

SANDBOX_UID = 65534
FAKE_CPUS = 2
# Values a launcher's host tuning may read before it writes; any other /sys write fails.
FAKE_SYS: dict[str, str] = {
    **{
        f"devices/system/cpu/cpu{k}/cpufreq/scaling_governor": "schedutil" for k in range(FAKE_CPUS)
    },
    **{
        f"devices/system/cpu/cpu{k}/cpufreq/scaling_available_governors": (
            "performance schedutil powersave"
        )
        for k in range(FAKE_CPUS)
    },
    "devices/system/cpu/online": f"0-{FAKE_CPUS - 1}",
    "kernel/mm/transparent_hugepage/enabled": "always [madvise] never",
    "kernel/mm/transparent_hugepage/defrag": "always defer defer+madvise [madvise] never",
}
MAX_SYSCTL_BYTES = 64 * 1024


class ImportRefused(UsageError):
    """A folder could not be imported: containment breach, time limit, unreadable folder."""


@dataclass(frozen=True)
class Limits:
    """What one node's sandbox may use; the time limit is for the whole run."""

    time_s: float = 120.0
    processes: int = 256
    file_bytes: int = 64 * 1024 * 1024
    memory_bytes: int = 4 * 1024 * 1024 * 1024


@dataclass(frozen=True)
class NodeTree:
    """The scratch folders one node's sandbox sees as /root, /tmp, /proc/sys and /sys."""

    base: Path

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def tmp(self) -> Path:
        return self.base / "tmp"

    @property
    def proc_sys(self) -> Path:
        return self.base / "proc-sys"

    @property
    def sys(self) -> Path:
        return self.base / "sys"


def bwrap_path() -> str:
    """Where bubblewrap is; a one-line refusal naming the fix without it."""
    found = shutil.which("bwrap")
    if found is None:
        raise ImportRefused(
            "bubblewrap (bwrap) is not installed: the importer runs a folder's scripts only "
            "inside its sandbox; install it with scripts/bootstrap.sh tools (apt-get install "
            "bubblewrap)"
        )
    return found


def sandbox_python() -> str:
    """The system's python3 (the scripts' own), for the reaper and the recorders inside.

    The sandbox hides /root, where a virtual environment's interpreter may live.
    """
    found = shutil.which("python3", path=SYSTEM_PATH)
    if found is None:
        raise ImportRefused("no python3 on the system PATH: the folder's scripts need one")
    real = os.path.realpath(found)
    if real == "/root" or real.startswith("/root/"):
        raise ImportRefused(
            f"the system python3 resolves to {real}, under /root, which the sandbox hides; "
            "install Debian's python3"
        )
    return found


def _walk_files(top: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Regular files under ``top``, never following a symlink."""
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                stack.append(Path(entry.path))
            elif stat.S_ISREG(info.st_mode):
                yield Path(entry.path), info


def copy_proc_sys(into: Path, source: Path = Path("/proc/sys")) -> None:
    """The sandbox's writable /proc/sys: the host's folders, and no values.

    A write to any key (``sysctl -w``, ``echo 0 > /proc/sys/vm/swappiness``)
    creates its file here and shows as host tuning; a script that reads a value
    first fails, named. Copying the values too costs a thousand file creations
    per node, most of the import's time on a busy disk.
    """
    into.mkdir(parents=True, exist_ok=True)
    for top, _dirs, _files in os.walk(source):
        (into / Path(top).relative_to(source)).mkdir(parents=True, exist_ok=True)


def fake_sys(into: Path) -> None:
    """The few /sys files host tuning touches, with plausible values and mtime 0."""
    for rel, value in FAKE_SYS.items():
        target = into / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(value + "\n")
        os.utime(target, ns=(0, 0))


@dataclass(frozen=True)
class Write:
    """A write a node's scripts made to its fake /proc/sys or /sys."""

    node: int
    path: str
    value: str


def writes(tree: NodeTree, node: int) -> list[Write]:
    """Every file of the node's fake /proc/sys and /sys written during the run."""
    found: list[Write] = []
    for top, shown in ((tree.proc_sys, "/proc/sys"), (tree.sys, "/sys")):
        for path, info in _walk_files(top):
            if info.st_mtime_ns == 0:
                continue
            data = read_small(path, MAX_SYSCTL_BYTES) or b""
            value = data.decode(errors="replace").rstrip("\n")
            found.append(Write(node, f"{shown}/{path.relative_to(top).as_posix()}", value))
    return sorted(found, key=lambda w: w.path)


# Top-level folders of the host the sandbox does not show as they are: its own
# /proc, /dev, /sys, /tmp and /root, the platform's /user (the rank table's tree) and
# the engine image's /vllm-workspace.
OWN_TOP = frozenset({"proc", "dev", "sys", "tmp", "root", "user", IMAGE_WORKSPACE.lstrip("/")})


def host_root_binds(top: Path = Path("/")) -> list[str]:
    """The host's top-level entries, each read-only at its place (links as links).

    ``--ro-bind / /`` would show the host's root itself, where no mount point
    for the platform's ``/user/global/config`` can be made (read-only); binding
    each entry into bubblewrap's own root leaves room for it.
    """
    args: list[str] = []
    for entry in sorted(os.scandir(top), key=lambda e: e.name):
        if entry.name in OWN_TOP:
            continue
        path = str(top / entry.name)
        if entry.is_symlink():
            args += ["--symlink", os.readlink(path), path]
        else:
            args += ["--ro-bind", path, path]
    return args


def _chown_tree(top: Path, uid: int) -> None:
    os.chown(top, uid, uid, follow_symlinks=False)
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            os.chown(os.path.join(folder, name), uid, uid, follow_symlinks=False)


class Sandbox:
    """The bubblewrap command lines of one import run (scratch folder ``scratch``)."""

    def __init__(self, scratch: Path, platform_root: Path, limits: Limits) -> None:
        self.scratch = scratch
        self.platform_root = platform_root
        self.limits = limits
        self.bwrap = bwrap_path()
        self.as_root = os.geteuid() == 0
        self.pods: dict[int, str] = {}

    def node(self, index: int) -> NodeTree:
        return NodeTree(self.scratch / "nodes" / str(index))

    def prepare(self, index: int, pod: str, proc_sys_template: Path) -> NodeTree:
        """Lay out node ``index``'s scratch folders (its /root/script is the caller's)."""
        tree = self.node(index)
        for folder in (tree.root, tree.tmp):
            folder.mkdir(parents=True, exist_ok=True)
        shutil.copytree(proc_sys_template, tree.proc_sys, symlinks=True)
        fake_sys(tree.sys)
        self.pods[index] = pod
        return tree

    def hand_over(self) -> None:
        """Give the scratch folder to the sandbox's user (as root: ``nobody``)."""
        if self.as_root:
            _chown_tree(self.scratch, SANDBOX_UID)

    def _identity(self) -> list[str]:
        if not self.as_root:
            return []
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        uid = str(SANDBOX_UID)
        return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]

    def _limits(self) -> list[str]:
        prlimit = shutil.which("prlimit") or "/usr/bin/prlimit"
        lim = self.limits
        return [
            prlimit,
            f"--nproc={lim.processes}",
            f"--fsize={lim.file_bytes}",
            f"--as={lim.memory_bytes}",
            "--core=0",
            "--",
        ]

    def wrap(self, index: int, argv: list[str]) -> list[str]:
        """The command that runs ``argv`` as node ``index`` inside its sandbox."""
        tree = self.node(index)
        platform = str(self.platform_root)
        return [
            *self._identity(),
            *self._limits(),
            self.bwrap,
            "--unshare-all",
            "--unshare-user",
            "--uid",
            "0",
            "--gid",
            "0",
            "--hostname",
            self.pods.get(index, f"node{index}"),
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            *host_root_binds(),
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--bind",
            str(tree.proc_sys),
            "/proc/sys",
            "--bind",
            str(tree.sys),
            "/sys",
            "--ro-bind",
            "/etc",
            "/etc",
            "--bind",
            str(tree.tmp),
            "/tmp",
            "--bind",
            str(tree.root),
            "/root",
            "--ro-bind",
            str(self.platform_root / "model"),
            PLATFORM_MODEL_DIR,
            "--ro-bind",
            str(self.platform_root / "image" / IMAGE_WORKSPACE.lstrip("/")),
            IMAGE_WORKSPACE,
            "--ro-bind",
            str(self.platform_root / "config"),
            str(Path(PLATFORM_RANK_TABLE).parent),
            "--bind",
            platform,
            platform,
            "--chdir",
            str(self.platform_root / "start"),
            "--setenv",
            "FAKEPLATFORM_SYSCTL_ROOT",
            "/proc/sys",
            "--remount-ro",
            "/",
            "--",
            *argv,
        ]


# stderr words that say what a script tried that the sandbox stopped, in check order.
BREACHES: tuple[tuple[str, str], ...] = (
    ("Read-only file system", "tried to write outside its scratch folder"),
    ("Permission denied", "was denied access outside its scratch folder"),
    ("Network is unreachable", "tried to use the network"),
    ("Cannot assign requested address", "tried to use the network"),
    ("Connection refused", "tried to use the network"),
    ("Temporary failure in name resolution", "tried to use the network"),
    ("Name or service not known", "tried to use the network"),
    ("Resource temporarily unavailable", "hit the sandbox's process limit (a fork flood)"),
    ("Cannot fork", "hit the sandbox's process limit (a fork flood)"),
    ("can't fork", "hit the sandbox's process limit (a fork flood)"),
    ("File size limit exceeded", "wrote more than the sandbox's file size limit"),
)


def breach(stderr: str) -> tuple[str, str] | None:
    """(what the script tried, the stderr line that says so), or None."""
    for line in stderr.splitlines():
        for words, what in BREACHES:
            if words in line:
                return what, line.strip()[:200]
    return None
