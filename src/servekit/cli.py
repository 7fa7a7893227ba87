"""The ``servekit`` command: parses, calls one function, prints.

Each command group lives in :mod:`servekit.commands` and registers itself on
the root app. Heavy imports happen inside command bodies so that ``--help`` and
the proxy start fast. :class:`~servekit.errors.UsageError` becomes one line on
stderr and exit code 2.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import typer

from servekit.commands import register_all
from servekit.errors import UsageError, refusal_of

app = typer.Typer(
    name="servekit",
    help="Serving layouts as software: catalog, render, run, proxy, accept, bench, kits.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
register_all(app)


def leaf_commands() -> dict[str, Any]:
    """Every runnable command by its full name ("kit verify"), for the docs tables and tests."""

    def leaves(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
        subs = getattr(cmd, "commands", None) or {}
        for name, sub in subs.items():
            yield from leaves(sub, (*path, name))
        if not subs or getattr(cmd, "invoke_without_command", False):
            yield " ".join(path), cmd

    return dict(leaves(typer.main.get_command(app)))


def _say(line: str) -> None:
    """One line on stderr; a non-UTF-8 argument quoted back is escaped, never a crash."""
    print(line.encode("utf-8", "backslashreplace").decode("utf-8"), file=sys.stderr)


def main() -> None:
    """Console entry point: map UsageError to a one-line message and exit 2.

    Errors that bad input causes wherever it is read (a path too long, a folder
    for a file, nesting past the recursion limit, an argument not UTF-8) are
    mapped here once, by :func:`~servekit.errors.refusal_of`, naming the option.
    """
    try:
        # With standalone_mode=False click hands a command's exit code back as the return value.
        rc = app(standalone_mode=False)
    except UsageError as exc:
        _say(f"error: {exc}")
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    except SystemExit:
        raise
    except (OSError, RecursionError, UnicodeError) as exc:
        refusal = refusal_of(exc, sys.argv[1:])
        if refusal is None:
            raise
        _say(f"error: {refusal}")
        sys.exit(refusal.exit_code)
    except Exception as exc:
        # Parser errors (unknown command, bad option): typer may vendor click, so match
        # click's exception interface rather than one module's class.
        show = getattr(exc, "show", None)
        if callable(show) and isinstance(getattr(exc, "exit_code", None), int):
            show()
            sys.exit(2)
        raise
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
