"""Errors that reach the user as one line and exit code 2.

Every capability raises :class:`UsageError` for bad input (a missing layout, an
unknown field, a port in use). The CLI turns it into ``error: <message>`` on
stderr with exit code 2 and no traceback, so operators see the field and the
fix, not a stack.
"""

from __future__ import annotations

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


def first_error(exc: ValidationError, top: str = "(root)") -> tuple[str, str]:
    """The first error of a pydantic validation as (dotted field path, message).

    ``top`` names the place when the error is about the whole document. Every
    "field X: why" message of servekit starts from this one reading.
    """
    err = exc.errors()[0]
    return ".".join(str(p) for p in err["loc"]) or top, err["msg"]
