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

from pydantic import Field, model_validator

from servekit.vocabulary import StrictModel

VAR_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class Ref(StrictModel):
    """A script variable, with the value it has here."""

    var: str = Field(pattern=VAR_NAME, description="the script variable, e.g. NODE0_IP")
    value: str = Field(description="its value for a process started here")


class NodeRef(Ref):
    """Node ``node``'s address (the variable ``NODE<k>_IP``), with its value here.

    Typed, so what a command says about a node is read from ``node``, never from
    the variable's name.
    """

    node: int = Field(ge=0, description="the node whose address this is")

    @classmethod
    def of(cls, node: int, value: str) -> NodeRef:
        """Node ``node``'s address, ``value`` here."""
        return cls(var=node_var(node), node=node, value=value)

    @model_validator(mode="after")
    def _agrees(self) -> NodeRef:
        if self.var != node_var(self.node):
            raise ValueError(f"{self.var}: node {self.node}'s address is {node_var(self.node)}")
        return self


Part = str | NodeRef | Ref
"""One piece of a word: data, a node's address, or another script variable."""


class Word(StrictModel):
    """One argv item built from data and references, present only when ``when`` is set."""

    parts: tuple[Part, ...] = Field(min_length=1)
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


def joined(*pieces: Part | Word, when: Ref | None = None) -> Arg:
    """One word from data, references and words (their conditions dropped), adjacent
    data merged; plain data (no reference, no condition) is a plain string."""
    parts: list[Part] = []
    for piece in pieces:
        for part in piece.parts if isinstance(piece, Word) else (piece,):
            if isinstance(part, str) and parts and isinstance(parts[-1], str):
                parts[-1] += part
            elif part != "":
                parts.append(part)
    if when is None and all(isinstance(p, str) for p in parts):
        return "".join(p for p in parts if isinstance(p, str))
    return Word(parts=tuple(parts) or ("",), when=when)


def resolved_argv(command: Iterable[Arg], *, node_text: str | None = None) -> tuple[str, ...]:
    """The argv a process started here runs (a conditional word vanishes when unset).

    ``node_text``: every node's address reads so instead (``${NODE_IP}``: the command
    placement-free, as a comparison of two Plans wants it).
    """
    out: list[str] = []
    for arg in command:
        if isinstance(arg, str):
            out.append(arg)
        elif arg.when is None or arg.when.value:
            out.append("".join(_text(p, node_text) for p in arg.parts))
    return tuple(out)


def _text(part: Part, node_text: str | None) -> str:
    if isinstance(part, str):
        return part
    if node_text is not None and isinstance(part, NodeRef):
        return node_text
    return part.value


def _quoted(parts: tuple[Part, ...]) -> str:
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


def referenced_nodes(command: Iterable[Arg]) -> set[int]:
    """Every node whose address the command refers to."""
    return {
        p.node
        for arg in command
        if isinstance(arg, Word)
        for p in arg.parts
        if isinstance(p, NodeRef)
    }


def references(command: Iterable[Arg]) -> set[str]:
    """Every script variable the command refers to (conditions included)."""
    names: set[str] = set()
    for arg in command:
        if isinstance(arg, Word):
            names |= {p.var for p in arg.parts if isinstance(p, Ref)}
            if arg.when is not None:
                names.add(arg.when.var)
    return names
