"""Output folders: servekit replaces a folder whole, and only one it may replace.

A many-file output (rendered scripts, a report site) is built in a sibling temp
folder and swapped in at once; :func:`check_output_dir` refuses destinations that
are not servekit's to replace. Single files are written with
:mod:`servekit.vocabulary.atomic`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

MARKER = ".servekit-output"


def _protected(path: Path) -> str | None:
    """Why ``path`` may never be replaced, or None."""
    resolved = path.resolve()
    cwd = Path.cwd().resolve()
    if resolved == Path(resolved.anchor):
        return "is the filesystem root"
    if resolved == Path.home().resolve():
        return "is your home folder"
    if resolved == cwd or resolved in cwd.parents:
        return "holds the current folder"
    return None


def _overlap(final: Path, inputs: Sequence[tuple[str, Path]]) -> str | None:
    """Why writing ``final`` would replace or nest inside an input, or None."""
    out = final.resolve()
    for what, path in inputs:
        held = path.resolve()
        if out == held:
            return f"is the {what} it reads"
        if out in held.parents:
            return f"holds the {what} it reads ({held})"
        if held in out.parents:
            return f"is inside the {what} ({held})"
    return None


def check_output_dir(
    final: Path,
    force: bool = False,
    flag: str = "--out",
    inputs: Sequence[tuple[str, Path]] = (),
) -> None:
    """Refuse a destination servekit must not replace; one UsageError naming the fix.

    servekit replaces a folder whole only when it is empty or holds its own marker
    (it wrote it before); a folder of someone else's files is refused unless
    ``force``, and the filesystem root, the home folder and the current folder (or
    one above it) are refused always, as is any folder that is, holds or lies
    inside one of ``inputs`` (``(what, path)``: say the catalog a render reads),
    with or without ``force``: replacing it would delete what is being read.
    """
    from servekit.errors import UsageError

    clash = _overlap(final, inputs)
    if clash is not None:
        raise UsageError(f"{flag} {final}: {clash}; give a folder outside it")

    if final.is_symlink():
        raise UsageError(f"{flag} {final}: is a symbolic link; give a real folder")
    if not final.exists():
        return
    if not final.is_dir():
        raise UsageError(f"{flag} {final}: exists and is not a folder; pick a folder")
    why = _protected(final)
    if why is not None:
        raise UsageError(f"{flag} {final}: {why}; give a new or empty folder")
    if force or (final / MARKER).is_file():
        return
    try:
        empty = next(final.iterdir(), None) is None
    except OSError as exc:
        raise UsageError(f"{flag} {final}: cannot read it ({exc.strerror})") from exc
    if not empty:
        raise UsageError(
            f"{flag} {final}: folder holds files servekit did not write; "
            "give a new or empty folder, or --force to replace it"
        )


@contextlib.contextmanager
def staged_dir(final: Path, *, force: bool = False, flag: str = "--out") -> Iterator[Path]:
    """Yield a sibling temp folder; on success it replaces ``final`` whole.

    Used for outputs made of many files (rendered scripts, reports, sites): the
    folder appears complete or not at all, carries servekit's marker, and an
    existing ``final`` is replaced only as :func:`check_output_dir` allows.
    """
    check_output_dir(final, force, flag)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        yield tmp
        (tmp / MARKER).write_text("written by servekit; it may replace this folder whole\n")
        if final.exists():
            # A fresh empty sibling to swap the old folder into: a fixed name such
            # as ``.out.old`` could be a folder of the user's, and would be deleted.
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old.", dir=final.parent))
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
