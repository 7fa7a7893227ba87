"""Normalize a process's (argv, env, cwd) into comparable facts.

Facts of one process (``ProcessFacts``, JSON-able via ``to_json``):

- ``node``, ``kind`` (``engine`` | ``proxy``), ``cwd`` (``None`` when the process
  runs where the platform started the entry);
- ``program``: the argv words before the first flag (``["vllm", "serve",
  "/root/model"]``; ``python -m MODULE`` counts as program words);
- ``flags``: in argv order, each ``(name, values)``: ``--x=y`` is split (for ``--``
  flags), a flag with no value word is boolean and has ``values == ()`` (``null``
  in JSON), one value word that holds a JSON object or array is parsed (so
  whitespace does not matter but ``"true"`` and ``true`` stay distinct), several
  value words (``--prefiller-hosts A B``) stay several strings. A word is a flag
  when it starts with ``-``, is longer than one character and is not a number.
  Without a schema, a positional word right after a boolean flag reads as its value.
- ``env``: the variables the scripts set, changed or unset (value ``None``)
  relative to the environment the entry started with, less platform plumbing
  (``EXCLUDED_ENV``, ``EXCLUDED_ENV_PREFIXES``).

Machine-dependent values become placeholders (``Placeholders``): node k's IP
``{NODE<k>_IP}``, its NIC ``{NODE<k>_NIC}``, a variable's inherited value
``{INHERITED}`` (``LD_LIBRARY_PATH=/usr/local/lib:{INHERITED}``), harness paths.

``process_key`` names a process so that two sides can be matched; see its docstring.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

JSONValue = Any
Flag = tuple[str, tuple[JSONValue, ...]]

EXCLUDED_ENV = frozenset(
    {
        "MASTER",
        "ENV_LOG",
        "LOCAL_IP",
        "NIC_NAME",
        "ENGINE_ID",
        "KV_PORT",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
        "PATH",
        "HOME",
        # servekit's rendered entry hands these to its process scripts
        "NODE_IP",
        "NODE_NIC",
        "BUNDLE_DIR",
        # ... and its own bookkeeping; every other SERVEKIT_ variable is a value a process
        # gets (the guard's), compared like any other
        "SERVEKIT_NODE",
        "SERVEKIT_LAYOUT",
        "SERVEKIT_CATALOG",
    }
)
_NODE_ADDRESS = re.compile(r"NODE\d+_IP")
EXCLUDED_ENV_PREFIXES = ("AISHIPBOX_", "FAKEPLATFORM_")
INHERITED = "{INHERITED}"
_NUMBER = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?")


def is_flag(word: str) -> bool:
    """``-x``, ``--x``, ``--x=y``; not ``-``, not ``-5`` or ``-0.5``."""
    return len(word) > 1 and word.startswith("-") and _NUMBER.fullmatch(word) is None


def _reject_constant(name: str) -> None:
    raise ValueError(name)


def parse_word(word: str) -> JSONValue:
    """A value word: a JSON object or array parsed, anything else kept as a string."""
    if not word.lstrip().startswith(("{", "[")):
        return word
    try:
        value = json.loads(word, parse_constant=_reject_constant)
        json.dumps(value, allow_nan=False)  # 1e400 parses to inf: not JSON data then
    except (ValueError, RecursionError):
        return word
    return value if isinstance(value, dict | list) else word


def _program_length(argv: Sequence[str]) -> int:
    n = 0
    while n < len(argv) and not is_flag(argv[n]):
        n += 1
    interpreter = n == 1 and PurePosixPath(argv[0]).name.startswith("python")
    if interpreter and len(argv) > 2 and argv[1] == "-m" and not is_flag(argv[2]):
        n = 3
        while n < len(argv) and not is_flag(argv[n]):
            n += 1
    return n


def parse_argv(argv: Sequence[str]) -> tuple[tuple[str, ...], tuple[Flag, ...]]:
    """Split argv into (program words, flags in order)."""
    n = _program_length(argv)
    program = tuple(argv[:n])
    flags: list[Flag] = []
    i = n
    while i < len(argv):
        name = argv[i]
        words: list[str] = []
        if name.startswith("--") and "=" in name:
            name, _, first = name.partition("=")
            words.append(first)
        i += 1
        while i < len(argv) and not is_flag(argv[i]):
            words.append(argv[i])
            i += 1
        flags.append((name, (parse_word(words[0]),) if len(words) == 1 else tuple(words)))
    return program, tuple(flags)


def render_argv(program: Sequence[str], flags: Sequence[Flag]) -> list[str]:
    """The argv ``parse_argv`` reads back as (program, flags); JSON compact."""
    argv = list(program)
    for name, values in flags:
        words = [v if isinstance(v, str) else json.dumps(v, separators=(",", ":")) for v in values]
        if words and name.startswith("--") and is_flag(words[0]):
            argv.append(f"{name}={words.pop(0)}")  # only --x=-y carries a flag-like value
        else:
            argv.append(name)
        argv.extend(words)
    return argv


@dataclass(frozen=True)
class Placeholders:
    """Machine-dependent values and the placeholders that replace them.

    ``literals``: (value, placeholder) replaced wherever the value stands alone
    (not inside a longer word or dotted number: ``10.88.0.1`` is not replaced in
    ``10.88.0.10``). ``inherited``: variable -> spellings of its inherited value,
    replaced by ``{INHERITED}`` in that variable only. ``start_dir``: the cwd that
    means "where the platform started the entry" (facts say ``None``).
    """

    literals: tuple[tuple[str, str], ...] = ()
    inherited: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    start_dir: str | None = None

    def text(self, value: str) -> str:
        for literal, placeholder in sorted(self.literals, key=lambda lp: -len(lp[0])):
            if literal:
                pattern = r"(?<![\w.])" + re.escape(literal) + r"(?![\w])"
                value = re.sub(pattern, placeholder.replace("\\", "\\\\"), value)
        return value

    def value(self, value: JSONValue) -> JSONValue:
        """Placeholders applied to every string inside a (JSON) value."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {self.text(k): self.value(v) for k, v in value.items()}
        return value

    def env_value(self, name: str, value: str | None) -> str | None:
        if value is None:
            return None
        for spelling in sorted(self.inherited.get(name, ()), key=len, reverse=True):
            if spelling:
                value = value.replace(spelling, INHERITED)
        return self.text(value)


def node_placeholders(
    ips: Sequence[str], nics: Sequence[str] = (), extra: Sequence[tuple[str, str]] = ()
) -> tuple[tuple[str, str], ...]:
    """``{NODE<k>_IP}`` and ``{NODE<k>_NIC}`` literals for nodes in order."""
    pairs = [(ip, f"{{NODE{k}_IP}}") for k, ip in enumerate(ips)]
    pairs += [(nic, f"{{NODE{k}_NIC}}") for k, nic in enumerate(nics)]
    return (*pairs, *extra)


def is_excluded(name: str) -> bool:
    """Platform plumbing that is not a fact of the command."""
    return (
        name in EXCLUDED_ENV
        or name.startswith(EXCLUDED_ENV_PREFIXES)
        or _NODE_ADDRESS.fullmatch(name) is not None
    )


def env_changes(env: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str | None]:
    """Variables set or changed (value) or unset (``None``) relative to ``base``."""
    changed: dict[str, str | None] = {k: v for k, v in env.items() if base.get(k) != v}
    changed.update({k: None for k in base if k not in env})
    return changed


@dataclass(frozen=True)
class ProcessFacts:
    """The normalized facts of one process; see the module docstring."""

    node: int
    kind: str
    cwd: str | None
    program: tuple[str, ...]
    flags: tuple[Flag, ...]
    env: dict[str, str | None]

    @property
    def key(self) -> str:
        return process_key(self)

    def flag_values(self) -> dict[str, list[tuple[JSONValue, ...]]]:
        """Flag name -> its value tuples in order (a repeated flag has several)."""
        grouped: dict[str, list[tuple[JSONValue, ...]]] = {}
        for name, values in self.flags:
            grouped.setdefault(name, []).append(values)
        return grouped

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "node": self.node,
            "kind": self.kind,
            "cwd": self.cwd,
            "program": list(self.program),
            "flags": [[name, *(values or (None,))] for name, values in self.flags],
            "env": dict(sorted(self.env.items())),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProcessFacts:
        return cls(
            node=data["node"],
            kind=data["kind"],
            cwd=data["cwd"],
            program=tuple(data["program"]),
            flags=tuple(flags_from_json(data["flags"])),
            env=dict(data["env"]),
        )


def flags_from_json(entries: Iterable[Sequence[Any]]) -> list[Flag]:
    """``to_json``'s ``[name, value...]`` entries (``[name, null]``: boolean) as flags."""
    return [(name, () if values == [None] else tuple(values)) for name, *values in entries]


def process_facts(
    *,
    node: int,
    kind: str,
    argv: Sequence[str],
    env: Mapping[str, str | None],
    cwd: str | None,
    placeholders: Placeholders,
) -> ProcessFacts:
    """Facts of one process; ``env`` is what it set/changed/unset (see ``env_changes``)."""
    program, flags = parse_argv(argv)
    return ProcessFacts(
        node=node,
        kind=kind,
        cwd=None if cwd is None or cwd == placeholders.start_dir else placeholders.text(cwd),
        program=tuple(placeholders.text(w) for w in program),
        flags=tuple((name, tuple(placeholders.value(v) for v in values)) for name, values in flags),
        env={
            name: placeholders.env_value(name, value)
            for name, value in sorted(env.items())
            if not is_excluded(name)
        },
    )


def _single(facts: ProcessFacts, name: str) -> str | None:
    values = facts.flag_values().get(name)
    if not values or len(values[-1]) != 1 or not isinstance(values[-1][0], str):
        return None
    return str(values[-1][0])


def dp_rank(facts: ProcessFacts) -> int | None:
    """The first DP rank a process serves: ``--data-parallel-rank``, else
    ``--data-parallel-start-rank``, else 0 for a DP leader (``--data-parallel-size``)."""
    for name in ("--data-parallel-rank", "--data-parallel-start-rank"):
        text = _single(facts, name)
        if text is not None and text.isdigit():
            return int(text)
    return 0 if "--data-parallel-size" in facts.flag_values() else None


def process_key(facts: ProcessFacts) -> str:
    """``n<node>/<kind>`` plus ``/dp<rank>`` for a DP process, else ``/port<p>``.

    The DP rank, not the port, identifies DP processes: headless ranks are matched
    whether or not one side gives them a ``--port`` (the source's headless ranks
    keep one). Single processes are told apart by ``--port``. Two processes of one
    side with the same key (two DP engines on one node) are disambiguated by
    ``keyed``, which appends ``/port<p>`` and then ``#<i>``.
    """
    key = f"n{facts.node}/{facts.kind}"
    rank = dp_rank(facts)
    if rank is not None and facts.kind == "engine":
        return f"{key}/dp{rank}"
    port = _single(facts, "--port")
    return f"{key}/port{port}" if port is not None else key


def keyed(processes: Sequence[ProcessFacts]) -> dict[str, ProcessFacts]:
    """Processes by ``process_key``, collisions made unique (see ``process_key``)."""
    counts = Counter(p.key for p in processes)
    result: dict[str, ProcessFacts] = {}
    for p in processes:
        key = p.key
        if counts[key] > 1:
            key += f"/port{_single(p, '--port')}"
        base, i = key, 1
        while key in result:
            i += 1
            key = f"{base}#{i}"
        result[key] = p
    return result


def sort_key(facts: ProcessFacts) -> tuple[Any, ...]:
    """Deterministic order: node, kind, DP rank, port, then the facts themselves."""
    rank = dp_rank(facts)
    port = _single(facts, "--port")
    return (
        facts.node,
        facts.kind,
        -1 if rank is None else rank,
        int(port) if port is not None and port.isdigit() else -1,
        json.dumps(facts.to_json(), sort_keys=True),
    )


def sorted_facts(processes: Sequence[ProcessFacts]) -> list[ProcessFacts]:
    return sorted(processes, key=sort_key)
