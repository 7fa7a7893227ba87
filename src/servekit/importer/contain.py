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
- an allow-listed view, not the host's ``/``: the system folders a launcher
  runs from (:data:`SYSTEM_DIRS`: ``/usr`` and the ``/bin``, ``/sbin``,
  ``/lib*`` beside it), the few ``/etc`` files a shell and python read
  (:data:`ETC_FILES`), all read-only, and nothing else of the host: no
  ``/home``, ``/var``, ``/srv``, ``/opt``, ``/mnt``, ``/work``, nor the invoking
  user's ``$HOME`` wherever it is (masked by an empty tmpfs should it lie inside
  an allowed folder), whoever runs the import; the root itself is remounted
  read-only last, so a write anywhere but a scratch folder fails as
  "Read-only file system"; a fresh ``/dev`` and ``/proc``;
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

import contextlib
import os
import pwd
import shutil
import signal
import stat
import time
import unicodedata
import uuid
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
# The host's system folders the sandbox sees, read-only (a link, as on merged-/usr
# Debian, is recreated as the same link); everything else of the host is absent.
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
# /etc files a shell, python and the launchers read (users, hosts, the loader's cache,
# the time zone, alternatives' links); not the rest of /etc (keys, credentials, configs).
ETC_FILES = (
    "passwd",
    "group",
    "hosts",
    "host.conf",
    "nsswitch.conf",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "alternatives",
    "os-release",
    "debian_version",
)


class ImportRefused(UsageError):
    """A folder could not be imported: containment breach, time limit, unreadable folder."""


@dataclass(frozen=True)
class Limits:
    """What the sandboxes may use.

    Per node process: ``processes``, ``file_bytes`` (each file), ``memory_bytes``
    (address space). For the whole import, every node together: ``time_s``,
    ``disk_bytes`` and ``disk_entries`` (all the scratch folder holds, watched while
    the nodes run), ``total_memory_bytes`` (a memory cgroup around every sandbox,
    where the host lets servekit make one).
    """

    time_s: float = 120.0
    processes: int = 256
    file_bytes: int = 64 * 1024 * 1024
    memory_bytes: int = 4 * 1024 * 1024 * 1024
    disk_bytes: int = 512 * 1024 * 1024
    disk_entries: int = 50_000
    total_memory_bytes: int = 4 * 1024 * 1024 * 1024


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


def system_view(root: Path = Path("/")) -> list[str]:
    """bwrap options for the host's allow-listed system folders and /etc files."""
    words: list[str] = []
    for name in SYSTEM_DIRS:
        path = root / name
        if path.is_symlink():
            words += ["--symlink", os.readlink(path), f"/{name}"]
        elif path.is_dir():
            words += ["--ro-bind", str(path), f"/{name}"]
    for name in ETC_FILES:
        words += ["--ro-bind-try", str(root / "etc" / name), f"/etc/{name}"]
    return words


def invoking_homes() -> list[str]:
    """The invoking user's home folders ($HOME and the password database's), resolved."""
    found = {os.path.expanduser("~")}
    with contextlib.suppress(KeyError):
        found.add(pwd.getpwuid(os.getuid()).pw_dir)
    return sorted({os.path.realpath(h) for h in found if h and h != "/"})


def _inside(path: str, tops: list[str]) -> bool:
    return any(path == top or path.startswith(top.rstrip("/") + "/") for top in tops)


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


DISK_CHECK_S = 0.25


class DiskWatch:
    """Everything under the import's scratch folder, summed while the nodes run.

    ``RLIMIT_FSIZE`` bounds each file, not how many a script writes: 1.5 GB in 3 s
    were written in 64 MiB files. Called by the harness while it waits (at most
    every :data:`DISK_CHECK_S`); the first call over a bound names it, and the
    harness then kills every node. A walk never follows a link and stops as soon
    as the entry count is past its bound, so it costs at most ``disk_entries``
    ``lstat`` calls.
    """

    def __init__(self, scratch: Path, limits: Limits) -> None:
        self.scratch = scratch
        self.limits = limits
        self.next_check = 0.0
        self.before = (0, 0)

    def mark(self) -> None:
        """What the scratch folder holds before the nodes run (the folder's copies,
        the platform): the bounds are on what the scripts add to it."""
        self.before = self.usage()

    def usage(self) -> tuple[int, int]:
        """(bytes allocated, entries) under the scratch folder, counting up to the bound."""
        used, entries = 0, 0
        stack = [str(self.scratch)]
        while stack and entries <= self.before[1] + self.limits.disk_entries:
            try:
                with os.scandir(stack.pop()) as found:
                    for entry in found:
                        entries += 1
                        info = entry.stat(follow_symlinks=False)
                        used += info.st_blocks * 512
                        if stat.S_ISDIR(info.st_mode):
                            stack.append(entry.path)
            except OSError:
                continue
        return used, entries

    def __call__(self) -> str | None:
        now = time.monotonic()
        if now < self.next_check:
            return None
        self.next_check = now + DISK_CHECK_S
        used, entries = self.usage()
        used, entries = used - self.before[0], entries - self.before[1]
        lim = self.limits
        if used > lim.disk_bytes or entries > lim.disk_entries:
            return (
                f"wrote more than the import's disk limit ({lim.disk_bytes >> 20} MiB or "
                f"{lim.disk_entries} files written by all nodes; {used >> 20} MiB, {entries} "
                "seen); "
                "every node was killed"
            )
        return None


class MemoryGroup:
    """One memory cgroup around every node's sandbox: a cap for the whole import.

    ``RLIMIT_AS`` is per process: 5 processes held 5,155 MB under a 4 GiB limit.
    A cgroup counts them all. Made under servekit's own cgroup (v2 ``memory.max``
    or v1 ``memory.limit_in_bytes``) where the host lets it (as root on a writable
    cgroup file system); elsewhere :meth:`create` gives None and only the
    per-process limits and the process count hold.
    """

    def __init__(self, path: Path, version: int) -> None:
        self.path = path
        self.version = version

    @classmethod
    def create(cls, limit: int, fs: Path = Path("/sys/fs/cgroup")) -> MemoryGroup | None:
        for version, base in _own_memory_cgroups(fs):
            path = base / f"servekit-import-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            knob = "memory.max" if version == 2 else "memory.limit_in_bytes"
            try:
                path.mkdir()
            except OSError:
                continue
            try:
                (path / knob).write_text(str(limit))
                if version == 1:  # swap counts too where the kernel accounts it
                    with contextlib.suppress(OSError):
                        (path / "memory.memsw.limit_in_bytes").write_text(str(limit))
            except OSError:
                with contextlib.suppress(OSError):
                    path.rmdir()
                continue
            return cls(path, version)
        return None

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def join(self) -> list[str]:
        """A command prefix that moves itself into the group, then execs the rest."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.procs)]

    def oom_kills(self) -> int:
        """How many processes the kernel killed at the group's limit (``oom_kill``)."""
        events = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in (self.path / events).read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def remove(self) -> None:
        """Remove the group (every process in it is gone by now; retried briefly)."""
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)


def _own_memory_cgroups(fs: Path) -> list[tuple[int, Path]]:
    """Where this process's memory cgroup is (v1 hierarchy first, then v2)."""
    found: list[tuple[int, Path]] = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _id, controllers, where = line.split(":", 2)
        rel = where.lstrip("/")
        if "memory" in controllers.split(","):
            found.insert(0, (1, fs / "memory" / rel))
        elif controllers == "" and (fs / "cgroup.controllers").is_file():
            try:
                if "memory" in (fs / rel / "cgroup.controllers").read_text().split():
                    found.append((2, fs / rel))
            except OSError:
                pass
    return [(v, p) for v, p in found if p.is_dir()]


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
        self.memory: MemoryGroup | None = None
        self.disk = DiskWatch(scratch, limits)

    def open_memory_group(self) -> MemoryGroup | None:
        """The whole import's memory cgroup, where one can be made (see MemoryGroup)."""
        if self.memory is None:
            self.memory = MemoryGroup.create(self.limits.total_memory_bytes)
        return self.memory

    def close(self) -> None:
        if self.memory is not None:
            self.memory.remove()

    def memory_breach(self) -> str | None:
        """A refusal if any process of the import was stopped at the memory cgroup's limit."""
        if self.memory is None or self.memory.oom_kills() == 0:
            return None
        return (
            f"hit the import's memory limit ({self.limits.total_memory_bytes >> 20} MiB for "
            "all nodes together)"
        )

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

    def _masks(self) -> list[str]:
        """An empty tmpfs over the invoking user's home where an allowed folder holds it."""
        allowed = [f"/{name}" for name in SYSTEM_DIRS] + ["/etc", str(self.platform_root)]
        words: list[str] = []
        for home in invoking_homes():
            if home != "/root" and _inside(home, allowed) and os.path.isdir(home):
                words += ["--tmpfs", home]
        return words

    def wrap(self, index: int, argv: list[str]) -> list[str]:
        """The command that runs ``argv`` as node ``index`` inside its sandbox."""
        tree = self.node(index)
        platform = str(self.platform_root)
        return [
            *(self.memory.join() if self.memory is not None else []),
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
            *system_view(),
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
            *self._masks(),
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


FILE_SIZE_BREACH = "wrote more than the sandbox's file size limit"
MAX_SHOWN = 200

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
    ("File size limit exceeded", FILE_SIZE_BREACH),
)


def shown(text: str, limit: int = MAX_SHOWN) -> str:
    """A script's text made safe to print on the user's terminal, at most ``limit`` chars.

    Every control or format character (C0 and DEL, C1 such as the 8-bit CSI, bidi
    overrides, NUL) is written as its escape (``\\x1b``), so an OSC 52 clipboard
    write, a screen clear or hidden text arrive as visible characters, not as
    commands to the terminal; letters of any script pass unchanged.
    """
    out: list[str] = []
    for ch in text.strip()[:limit]:
        if unicodedata.category(ch)[0] == "C":
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def breach(stderr: str) -> tuple[str, str] | None:
    """(what the script tried, the stderr line that says so, made printable), or None."""
    for line in stderr.splitlines():
        for words, what in BREACHES:
            if words in line:
                return what, shown(line)
    return None


def status_breach(returncode: int | None) -> str | None:
    """What an exit status says the sandbox stopped: SIGXFSZ is the file size limit.

    dash prints nothing when a command dies of SIGXFSZ; the reaper reports the
    entry's death by signal N as 128 + N, so 153 is the only trace of the limit.
    """
    if returncode == 128 + signal.SIGXFSZ:
        return FILE_SIZE_BREACH
    return None
