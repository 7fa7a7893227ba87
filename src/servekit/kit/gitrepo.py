"""Bounded, shell-free git calls: the code baseline stamp and source = payload.

Every call is ``git -C REPO ...`` with a list argv (no shell), a time limit,
and configuration that keeps a repository's own settings from running
programs (``core.fsmonitor``, hooks are never triggered by these read-only
commands). Blob contents stream through ``git cat-file --batch`` and are
hashed as they arrive, so memory stays bounded however large the files are.
"""

from __future__ import annotations

import hashlib
import subprocess
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from servekit.errors import UsageError

TIMEOUT_S = 120.0
SAFE = ("-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false")
CHUNK = 1 << 20


def git(repo: Path, *args: str, timeout: float = TIMEOUT_S) -> str:
    """Run one git command and return its stdout; a failure is a UsageError naming --repo."""
    try:
        done = subprocess.run(
            ["git", *SAFE, "-C", str(repo), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.CalledProcessError as exc:
        why = (exc.stderr or "").strip().splitlines()[-1:] or [f"exit {exc.returncode}"]
        raise UsageError(f"--repo {repo}: git {args[0]} failed ({why[0][:200]})") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"--repo {repo}: git {args[0]} took more than {timeout:.0f} s") from None
    except OSError as exc:
        raise UsageError(f"--repo {repo}: cannot run git ({exc})") from None
    return done.stdout


def toplevel(repo: Path) -> Path:
    """The repository's root folder."""
    return Path(git(repo, "rev-parse", "--show-toplevel").strip())


def has_commit(repo: Path, commit: str) -> bool:
    """Whether the object store holds ``commit`` (whatever is checked out)."""
    try:
        git(repo, "cat-file", "-e", f"{commit}^{{commit}}")
    except UsageError:
        return False
    return True


def tracked_files(repo: Path, commit: str) -> list[str]:
    """Paths of every file in ``commit``'s tree."""
    out = git(repo, "ls-tree", "-r", "-z", "--name-only", commit)
    return [p for p in out.split("\0") if p]


def _feed(stdin: IO[bytes], names: list[str]) -> None:
    try:
        for name in names:
            stdin.write(name.encode("utf-8", "surrogateescape") + b"\n")
        stdin.close()
    except OSError:
        pass  # git stopped reading (killed on timeout): the reader reports it


def _read_exact(out: IO[bytes], size: int, sha: hashlib._Hash) -> None:
    left = size
    while left:
        block = out.read(min(CHUNK, left))
        if not block:
            raise EOFError("git cat-file output ended early")
        sha.update(block)
        left -= len(block)


def blob_sha256(repo: Path, commit: str, paths: Iterable[str]) -> dict[str, str | None]:
    """sha256 of each path's content at ``commit`` (None: no such file there)."""
    keys = list(paths)
    names = [f"{commit}:{p}" for p in keys]
    proc = subprocess.Popen(
        ["git", *SAFE, "-C", str(repo), "cat-file", "--batch"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    watchdog = threading.Timer(TIMEOUT_S, proc.kill)
    feeder = threading.Thread(target=_feed, args=(proc.stdin, names), daemon=True)
    watchdog.start()
    feeder.start()
    out: dict[str, str | None] = {}
    try:
        for key in keys:
            header = proc.stdout.readline().split()
            if len(header) != 3:  # "<name> missing": no such path at that commit
                out[key] = None
                continue
            sha = hashlib.sha256()
            _read_exact(proc.stdout, int(header[2]), sha)
            proc.stdout.read(1)
            out[key] = sha.hexdigest() if header[1] == b"blob" else None
    except (EOFError, ValueError) as exc:
        raise UsageError(f"--repo {repo}: reading files at {commit[:12]} failed ({exc})") from None
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()
    return out
