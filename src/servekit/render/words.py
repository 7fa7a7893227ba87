"""Plan template tokens as POSIX shell words, and their expansion for tests.

A template token is literal text in which servekit writes its own references:
``${NAME}`` (a script variable), ``$$`` (a literal dollar from data), or, as a
whole token, ``${NAME:+WORD}`` (the word only when NAME is non-empty: an option
that exists only when switched on, like the guard or an explicit BIND_HOST).
Everything else is data and is single-quoted, so no value from a layout, a
``--set`` or the rank table can run a command in a rendered script.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

_SEGMENT = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_CONDITIONAL = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*):\+(.*)\}$")


def _parts(token: str) -> list[tuple[str, str]]:
    """``("lit", text)`` and ``("ref", NAME)`` parts of a (non-conditional) token."""
    parts: list[tuple[str, str]] = []
    pos = 0
    text = ""
    for m in _SEGMENT.finditer(token):
        text += token[pos : m.start()]
        pos = m.end()
        if m.group(0) == "$$":
            text += "$"
            continue
        if text:
            parts.append(("lit", text))
            text = ""
        parts.append(("ref", m.group(1)))
    text += token[pos:]
    if text:
        parts.append(("lit", text))
    return parts


def shell_word(token: str) -> str:
    """One template token as a POSIX sh word: data single-quoted, references double-quoted."""
    cond = _CONDITIONAL.match(token)
    if cond:
        inner = "".join(
            shlex.quote(v) if kind == "lit" else '"${' + v + '}"'
            for kind, v in _parts(cond.group(2))
        )
        return "${" + cond.group(1) + ":+" + inner + "}"
    parts = _parts(token)
    if not parts:
        return "''"
    return "".join(shlex.quote(v) if kind == "lit" else '"${' + v + '}"' for kind, v in parts)


def references(token: str) -> set[str]:
    """Every variable a token refers to."""
    cond = _CONDITIONAL.match(token)
    names = {cond.group(1)} if cond else set()
    body = cond.group(2) if cond else token
    return names | {v for kind, v in _parts(body) if kind == "ref"}


def expand(template: tuple[str, ...] | list[str], values: Mapping[str, str]) -> list[str]:
    """What a shell makes of the tokens given ``values`` (conditional tokens may vanish)."""
    out: list[str] = []
    for token in template:
        cond = _CONDITIONAL.match(token)
        if cond:
            if values.get(cond.group(1)):
                out.append(_join(cond.group(2), values))
            continue
        out.append(_join(token, values))
    return out


def _join(token: str, values: Mapping[str, str]) -> str:
    return "".join(v if kind == "lit" else values[v] for kind, v in _parts(token))
