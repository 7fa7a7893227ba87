"""Errors that reach the user as one line and exit code 2.

Every capability raises :class:`UsageError` for bad input (a missing layout, an
unknown field, a port in use). The CLI turns it into ``error: <message>`` on
stderr with exit code 2 and no traceback, so operators see the field and the
fix, not a stack.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        # A value quoted from hostile input (a JSON key, a file name) must not break the
        # one line: control characters are shown escaped, as repr() would.
        if not message.isprintable():
            message = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class FirstError:
    """The first error of a pydantic validation, read once for every message built from it.

    ``loc`` is pydantic's path (a YAML reader maps it to a line), ``field`` the same
    dotted (``top`` when the error is about the whole document), ``kind`` pydantic's
    error type (``extra_forbidden``, ``missing``...), ``more`` how many errors follow.
    """

    loc: tuple[str | int, ...]
    field: str
    msg: str
    kind: str
    input: object
    more: int

    @property
    def reason(self) -> str:
        """The message without pydantic's ``Value error, `` prefix (a validator's own words)."""
        return self.msg.removeprefix("Value error, ")


def first_error_detail(exc: ValidationError, top: str = "(root)") -> FirstError:
    """The first error of ``exc`` with its path, type, input and the count of the rest."""
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    field = ".".join(str(p) for p in loc) or top
    return FirstError(loc, field, err["msg"], err["type"], err.get("input"), exc.error_count() - 1)


def first_error(exc: ValidationError, top: str = "(root)") -> tuple[str, str]:
    """The first error of a pydantic validation as (dotted field path, message).

    ``top`` names the place when the error is about the whole document. Every
    "field X: why" message of servekit starts from this one reading.
    """
    first = first_error_detail(exc, top)
    return first.field, first.msg


# What to do about an OSError on a path the user named, by errno.
_PATH_FIXES = {
    errno.ENAMETOOLONG: "a name in the path is over 255 bytes or the path over 4096; give a shorter path",
    errno.EISDIR: "it is a folder; give a file",
    errno.ENOTDIR: "a part of the path is not a folder; check the path",
    errno.ELOOP: "too many symbolic links; check the path",
    errno.ENOENT: "no such file or folder; check the path",
    errno.EACCES: "permission denied; check its permissions",
    errno.EPERM: "not permitted; check its permissions",
}
_SHOWN = 120


def _named_by(path: str, argv: Sequence[str]) -> str:
    """``--flag VALUE`` (or the argument) that names ``path`` or a folder above it."""
    best = ""
    for i, token in enumerate(argv):
        flag, eq, value = token.partition("=") if token.startswith("--") else ("", "", token)
        if not eq:
            flag = (
                argv[i - 1]
                if i and argv[i - 1].startswith("-") and not value.startswith("-")
                else ""
            )
        if (
            value
            and (path == value or path.startswith(value.rstrip("/") + "/"))
            and len(value) > len(best)
        ):
            best = f"{flag} {value}".strip()
    return best or path


def _shown(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def refusal_of(exc: BaseException, argv: Sequence[str]) -> UsageError | None:
    """The one-line refusal for an error bad input causes wherever it is read, or None.

    The CLI's last net: a path component over 255 bytes, a folder where a file is
    expected (``OSError`` with the path), a folder or document nested deeper than
    Python's recursion limit (``RecursionError``), an argument that is not UTF-8
    (``UnicodeError``). Each names the option that gave the path and the fix.
    """
    if isinstance(exc, OSError) and exc.filename is not None and exc.errno in _PATH_FIXES:
        path = os.fsdecode(exc.filename)
        return UsageError(f"{_shown(_named_by(path, argv))}: {_PATH_FIXES[exc.errno]}")
    if isinstance(exc, RecursionError):
        return UsageError(
            "the input is nested too deeply to read (a folder or document past about"
            f" {sys.getrecursionlimit()} levels); flatten it or give another"
        )
    if isinstance(exc, UnicodeError):
        for token in argv:
            try:
                token.encode("utf-8")
            except UnicodeEncodeError:
                shown = token.encode("utf-8", "backslashreplace").decode("ascii", "replace")
                return UsageError(f"argument {_shown(shown)}: not UTF-8 text; give it as UTF-8")
    return None
