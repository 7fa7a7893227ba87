"""A process's command as typed words: data, or references a node fills in at launch.

The Plan holds each command once, as a tuple of :data:`Arg`: a plain string is
data (a path, a flag, a JSON config) and stays literal everywhere; a
:class:`Word` joins data and :class:`Ref` references to script variables (a
node's address ``NODE<k>_IP``, ``BIND_HOST``, ``BUNDLE_DIR``, a defaults-table
tunable such as ``GPU_UTIL``), and may exist only when a variable is non-empty
(an option that is there only when switched on, like the guard or an explicit
BIND_HOST). Each reference carries the value it has here (the Plan's options).

Two functions derive everything else, so the two can never disagree:
:func:`resolved_argv` (what a process started here runs) and :func:`shell_words`
(what a rendered POSIX sh script says: data single-quoted, references
double-quoted, so no value from a layout, a ``--set`` or the rank table can run a
command).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from pydantic import Field

from servekit.vocabulary import StrictModel

VAR_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class Ref(StrictModel):
    """A script variable, with the value it has here."""

    var: str = Field(pattern=VAR_NAME, description="the script variable, e.g. NODE0_IP")
    value: str = Field(description="its value for a process started here")


class Word(StrictModel):
    """One argv item built from data and references, present only when ``when`` is set."""

    parts: tuple[str | Ref, ...] = Field(min_length=1)
    when: Ref | None = Field(
        default=None, description="the word exists only when this variable is non-empty"
    )


Arg = str | Word


def node_var(node: int) -> str:
    """The script variable holding node ``node``'s address."""
    return f"NODE{node}_IP"


def var(name: str, value: str) -> Word:
    """A word that is exactly one variable's value."""
    return Word(parts=(Ref(var=name, value=value),))


def resolved_argv(command: Iterable[Arg]) -> tuple[str, ...]:
    """The argv a process started here runs (a conditional word vanishes when unset)."""
    out: list[str] = []
    for arg in command:
        if isinstance(arg, str):
            out.append(arg)
        elif arg.when is None or arg.when.value:
            out.append("".join(p if isinstance(p, str) else p.value for p in arg.parts))
    return tuple(out)


def _quoted(parts: tuple[str | Ref, ...]) -> str:
    return "".join(
        (shlex.quote(p) if p else "") if isinstance(p, str) else '"${' + p.var + '}"' for p in parts
    )


def shell_word(arg: Arg) -> str:
    """One item as a POSIX sh word (``${VAR:+WORD}`` for a conditional one)."""
    if isinstance(arg, str):
        return shlex.quote(arg)
    inner = _quoted(arg.parts) or "''"
    if arg.when is None:
        return inner
    return "${" + arg.when.var + ":+" + inner + "}"


def shell_words(command: Iterable[Arg]) -> list[str]:
    """The command as a rendered script writes it, one shell word per item."""
    return [shell_word(arg) for arg in command]


def references(command: Iterable[Arg]) -> set[str]:
    """Every script variable the command refers to (conditions included)."""
    names: set[str] = set()
    for arg in command:
        if isinstance(arg, Word):
            names |= {p.var for p in arg.parts if isinstance(p, Ref)}
            if arg.when is not None:
                names.add(arg.when.var)
    return names
