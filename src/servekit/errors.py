"""Errors that reach the user as one line and exit code 2.

Every capability raises :class:`UsageError` for bad input (a missing layout, an
unknown field, a port in use). The CLI turns it into ``error: <message>`` on
stderr with exit code 2 and no traceback, so operators see the field and the
fix, not a stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""

    exit_code = 2

    def __init__(self, message: str) -> None:
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
