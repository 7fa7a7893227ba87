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
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from servekit.errors import UsageError
from servekit.importer.platform.harness import SYSTEM_PATH, read_small

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
            "--bind",
            platform,
            platform,
            *self._masks(),
            "--remount-ro",
            "/",
            "--chdir",
            str(self.platform_root / "start"),
            "--setenv",
            "FAKEPLATFORM_SYSCTL_ROOT",
            "/proc/sys",
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
