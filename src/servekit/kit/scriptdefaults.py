"""Defaults inside shipped shell scripts versus servekit's defaults table.

Launch scripts carry their defaults as ``NAME=${NAME:-value}``. A kit whose
scripts default ``GPU_UTIL`` to 0.9 while servekit's table says 0.92 ships a
different configuration from the one that was validated ("script default !=
delivered default", seed v3 item 4), so ``kit verify`` compares every such line
with :func:`servekit.defaults.script_defaults`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from servekit.errors import UsageError

_ASSIGN = re.compile(
    r"""^[ \t]*(?:export[ \t]+|local[ \t]+|readonly[ \t]+)?
        (?P<name>[A-Za-z_][A-Za-z0-9_]*)=
        (?P<q>["']?)\$\{(?P=name):?-(?P<value>[^}]*)\}(?P=q)""",
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


DEFAULT_KIND = "vllm-ascend"
ROLES = ("decode", "prefill")


def script_role(path: str) -> str:
    """The role a script serves, from its name: decode, prefill, else mixed."""
    name = path.lower()
    found = [role for role in ROLES if role in name]
    return found[0] if len(found) == 1 else "mixed"


def table(kind: str, role: str) -> dict[str, str]:
    """servekit's script defaults for one engine kind and role (NAME -> value)."""
    try:
        from servekit.defaults import ENGINE_KINDS, script_defaults
    except ImportError as exc:
        raise UsageError(
            "servekit.defaults.script_defaults() is not available in this build"
        ) from exc
    if kind not in ENGINE_KINDS:
        raise UsageError(f"--kind {kind!r}: choose one of {', '.join(ENGINE_KINDS)}")
    return dict(script_defaults(kind, role))  # type: ignore[arg-type]


def mismatches(found: list[ScriptDefault], expected: Mapping[str, str]) -> list[str]:
    """One sentence per script default that disagrees with the table."""
    return [
        f"{d.path}:{d.line}: {d.name} defaults to {d.value!r}, the table says {expected[d.name]!r}"
        for d in found
        if d.name in expected and d.value != expected[d.name]
    ]
