"""Scratch folders that always go away, and signals that let them.

Every temporary folder the kit commands make comes from :func:`scratch_dir`:
it is removed when the block ends, by error, Ctrl-C (``KeyboardInterrupt``) or
SIGTERM alike, because :func:`terminate_cleanly` turns SIGTERM and SIGHUP into
an ordinary exit that unwinds the stack. Only SIGKILL leaves one behind; its
name carries the PID namespace and the PID, so the next run removes folders of
this prefix whose process is gone (only this user's, only this namespace's).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

PREFIX = "servekit-kit-"


def _namespace() -> str:
    """An id of this PID namespace (PIDs mean nothing across namespaces)."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _owner_pid(name: str, namespace: str) -> int | None:
    """The PID a scratch folder name records, when it was made in this namespace."""
    parts = name.removeprefix(PREFIX).split("-")
    if not name.startswith(PREFIX) or len(parts) < 3 or parts[0] != namespace:
        return None
    return int(parts[1]) if parts[1].isdigit() else None


def sweep_stale(parent: Path | None = None) -> list[Path]:
    """Remove this user's scratch folders whose process no longer exists."""
    base = Path(parent or tempfile.gettempdir())
    namespace, removed = _namespace(), []
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            pid = _owner_pid(entry.name, namespace)
            if pid is None or pid == os.getpid() or _alive(pid):
                continue
            if entry.is_dir(follow_symlinks=False) and entry.stat().st_uid == os.geteuid():
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(Path(entry.path))
    return removed


@contextlib.contextmanager
def scratch_dir(parent: Path | None = None) -> Iterator[Path]:
    """A fresh private folder, removed when the block ends however it ends."""
    sweep_stale(parent)
    path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{_namespace()}-{os.getpid()}-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    signal.signal(signum, signal.SIG_IGN)  # a second signal must not cut the cleanup short
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def terminate_cleanly() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP exit through the stack (cleanups run).

    Exit status is 128 + the signal number, as a shell reports a killed command.
    Outside the main thread signals cannot be caught, so nothing changes there.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signums = (signal.SIGTERM, signal.SIGHUP)
    saved = {s: signal.signal(s, _exit_on_signal) for s in signums}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
