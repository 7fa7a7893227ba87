"""Defaults inside shipped shell scripts: finding them, and servekit's own table.

Launch scripts carry their defaults as ``NAME=${NAME:-value}``.
:func:`find_defaults` reads them (one line each, linear time on any input);
:mod:`servekit.kit.expect` compares them with the kit's own promises. With
``kit verify --kind KIND`` they are also compared with
:func:`servekit.defaults.script_defaults`, for kits whose scripts servekit
rendered.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from servekit.errors import UsageError
from servekit.kit.checks import CheckResult, failed, outcome, skipped
from servekit.vocabulary import ENGINE_KINDS, PD_ROLES, Role

_ASSIGN = re.compile(
    r"""^[ \t]*(?:export[ \t]+|local[ \t]+|readonly[ \t]+)?
        (?P<name>[A-Za-z_][A-Za-z0-9_]*)=
        (?P<q>["']?)\$\{(?P=name):?-(?P<value>[^}\n]*)\}(?P=q)""",
    re.MULTILINE | re.VERBOSE,
)


@dataclass(frozen=True)
class ScriptDefault:
    """One ``NAME=${NAME:-value}`` found in a script."""

    path: str
    line: int
    name: str
    value: str


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def find_defaults(path: str, text: str) -> list[ScriptDefault]:
    """Every ``NAME=${NAME:-value}`` assignment in a script, with its line."""
    out = []
    for match in _ASSIGN.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        out.append(ScriptDefault(path, line, match["name"], _unquote(match["value"])))
    return out


def is_shell_script(path: str, data: bytes) -> bool:
    """A ``.sh`` file or one whose shebang names sh, bash, dash or zsh."""
    if path.endswith(".sh"):
        return True
    first = data[:128].split(b"\n", 1)[0]
    return first.startswith(b"#!") and any(s in first for s in (b"sh", b"bash"))


def script_role(path: str) -> Role:
    """The role a script serves, from its name: decode, prefill, else mixed."""
    name = path.lower()
    found: list[Role] = [role for role in PD_ROLES if role in name]
    return found[0] if len(found) == 1 else "mixed"


def table(kind: str, role: str) -> dict[str, str]:
    """servekit's script defaults for one engine kind and role (NAME -> value)."""
    try:
        from servekit.defaults import script_defaults
    except ImportError as exc:
        raise UsageError(
            "servekit.defaults.script_defaults() is not available in this build"
        ) from exc
    if kind not in ENGINE_KINDS:
        raise UsageError(f"--kind {kind!r}: choose one of {', '.join(ENGINE_KINDS)}")
    return dict(script_defaults(kind, role))  # type: ignore[arg-type]


def table_row(
    captured: Mapping[str, bytes], lookup: Callable[[str], Mapping[str, str]]
) -> CheckResult:
    """The ``table`` row: shipped script defaults against servekit's table (``--kind``).

    ``lookup(path)`` gives the table column for that script (by its role).
    """
    problems: list[str] = []
    compared = 0
    try:
        for path, data in sorted(captured.items()):
            if not is_shell_script(path, data):
                continue
            expected = lookup(path)
            found = [
                d
                for d in find_defaults(path, data.decode("utf-8", "replace"))
                if d.name in expected
            ]
            compared += len(found)
            problems += [
                f"{d.path}:{d.line}: {d.name} defaults to {d.value!r},"
                f" the table says {expected[d.name]!r}"
                for d in found
                if d.value != expected[d.name]
            ]
    except UsageError as exc:
        return failed("table", [str(exc)])
    if not compared:
        return skipped("table", "no shipped script sets a default servekit's table knows")
    return outcome("table", problems, f"{compared} script default(s) equal servekit's table")
