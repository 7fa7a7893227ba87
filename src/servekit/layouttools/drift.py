"""``servekit layouts drift NAME --upstream FILE``: what moved in the upstream tutorial.

A layout records the tutorial it came from (``provenance.source``) and, through
its Plan, the command it runs per role. The source's authors write that they do
not notice when that tutorial moves on; this compares each role's command with
a newer reference: a file the user saves from the tutorial page (its shell code
blocks with ``export`` lines and ``vllm serve ...``), or a vllm-ascend docs
checkout's markdown. Each difference is a flag or variable added, removed or
changed upstream; one the layout already records as a deviation (its
provenance names that flag or variable) is marked as such, so what is left is
what moved.

The reader is bounded (bytes, lines, tokens per command, commands) and never
runs anything: it reads ``export NAME=VALUE`` and the words of ``vllm serve``
lines with line continuations joined, quotes resolved by :mod:`shlex`.
Commands are matched to roles by the ``kv_role`` of their
``--kv-transfer-config`` (producer: prefill, consumer: decode), a command
without one counts as mixed; within a role, the one sharing the layout's
``--data-parallel-size`` and ``--tensor-parallel-size`` shape best (A2 and A3
variants sit side by side on one page) wins.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from servekit.catalog import load
from servekit.errors import UsageError
from servekit.layouttools.compare import (
    FACT_FLAGS,
    Change,
    changes,
    env_of,
    flag_words,
    flags_of,
    put_flag,
)
from servekit.render import ProcessPlan, build_plan
from servekit.termtable import fit_tables
from servekit.vocabulary import ROLES, read_at_most, role_of_kv

MAX_BYTES = 4 * 1024 * 1024
MAX_LINES = 100_000
MAX_LINE = 64 * 1024
MAX_TOKENS = 2_000
MAX_COMMANDS = 500
_FENCE = re.compile(r"^\s*(```|~~~)\s*(\w*)")
_EXPORT = re.compile(r"^\s*export\s+([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_SHELL_LANGS = {"", "bash", "shell", "sh", "console", "zsh"}
# Flags whose value is per rank in the tutorials' templates ($1..$7).
_PER_RANK = re.compile(r"^\$\{?\d+\}?$")
# Addresses the spine sets on the node (the tutorial writes placeholders there).
_SPINE_FLAGS = frozenset({"--host", "--data-parallel-address"})
# What every layout rewrites by convention (the spine), not drift.
_CONVENTION_ENV = frozenset(
    {
        "HCCL_IF_IP",
        "GLOO_SOCKET_IFNAME",
        "TP_SOCKET_IFNAME",
        "HCCL_SOCKET_IFNAME",
        "ASCEND_RT_VISIBLE_DEVICES",
    }
)


@dataclass
class UpstreamCommand:
    """One ``vllm serve`` of the reference with the exports before it in its block."""

    line: int
    role: str
    model: str
    flags: dict[str, str]
    env: dict[str, str]


def _read(path: Path) -> str:
    too_large = f"larger than {MAX_BYTES} bytes; save only the tutorial"
    data = read_at_most(path, MAX_BYTES, f"--upstream {path}", too_large)
    text = data.decode("utf-8", errors="replace")
    if text.count("\n") > MAX_LINES:
        raise UsageError(f"--upstream {path}: more than {MAX_LINES} lines; save only the tutorial")
    return text


def _blocks(text: str) -> list[list[tuple[int, str]]]:
    """Shell code blocks (fenced), or the whole file when it has no fences."""
    lines = text.splitlines()
    if not any(_FENCE.match(line) for line in lines):
        return [list(enumerate(lines, 1))]
    blocks: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] | None = None  # the open block's lines
    shell = False  # whether the open block is shell (another block is skipped)
    for no, line in enumerate(lines, 1):
        m = _FENCE.match(line)
        if m and current is None:
            current, shell = [], m.group(2).lower() in _SHELL_LANGS
        elif m and current is not None:
            if shell:
                blocks.append(current)
            current = None
        elif current is not None:
            current.append((no, line[:MAX_LINE]))
    return blocks


def _logical(block: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Lines with ``\\`` continuations joined (and a quoted value's newlines kept in).

    Whether a quote is still open is carried from piece to piece
    (:func:`_quote_after`), so each character is read once: re-reading the whole
    value per line made one unclosed quote cost time quadratic in the file.
    """
    out: list[tuple[int, str]] = []
    start, acc, state = 0, "", ""
    for no, line in block:
        if line.lstrip().startswith("#") and not acc:
            continue
        if not acc:
            start = no
        if line.rstrip().endswith("\\"):
            piece = line.rstrip()[:-1] + " "
            acc, state = acc + piece, _quote_after(piece, state)
            continue
        acc, state = acc + line, _quote_after(line, state)
        if state in _QUOTES and len(acc) < MAX_LINE:
            acc, state = acc + "\n", _quote_after("\n", state)
            continue
        out.append((start, acc))
        acc, state = "", ""
    if acc:
        out.append((start, acc))
    return out


_QUOTES = ("'", '"')
# What ends each state of shlex's posix reader: outside (""), in '...', in "...", in a comment.
_STOPS = {
    "": re.compile(r"""['"\\#]"""),
    "'": re.compile("'"),
    '"': re.compile(r'["\\]'),
    "#": re.compile("\n"),
}


def _quote_after(text: str, state: str) -> str:
    """The state after ``text`` read from ``state``: "" outside, a quote open, or "#" in a comment.

    The rules of ``shlex.split(..., comments=True)``: a backslash outside quotes
    or inside double quotes takes the next character, ``#`` outside quotes
    comments out the rest of its line, single quotes take everything.
    """
    at = 0
    while (m := _STOPS[state].search(text, at)) is not None:
        stop, at = m.group(), m.end()
        if stop == "\\":
            at += 1
        elif state:
            state = ""
        else:
            state = stop
    return state


def _role(flags: dict[str, str]) -> str:
    raw = flags.get("--kv-transfer-config")
    if raw is None:
        return "mixed"
    try:
        cfg = json.loads(raw)
    except ValueError:
        return "mixed"
    kv_role = cfg.get("kv_role") if isinstance(cfg, dict) else None
    return role_of_kv(kv_role)


def parse_upstream(text: str) -> list[UpstreamCommand]:
    """Every ``vllm serve`` command of the reference, with its block's exports."""
    commands: list[UpstreamCommand] = []
    for block in _blocks(text):
        env: dict[str, str] = {}
        for no, line in _logical(block):
            m = _EXPORT.match(line)
            if m:
                try:
                    words = shlex.split(m.group(2))
                except ValueError:
                    continue
                env[m.group(1)] = words[0] if words else ""
                continue
            if "vllm serve" not in line:
                continue
            try:
                words = shlex.split(line.split("vllm serve", 1)[1], comments=True)
            except ValueError:
                continue
            if len(words) > MAX_TOKENS:
                raise UsageError(
                    f"--upstream line {no}: more than {MAX_TOKENS} words in one command"
                )
            model = words[0] if words and not words[0].startswith("--") else ""
            flags = {name: value for name, value in flag_words(words) if name is not None}
            commands.append(UpstreamCommand(no, _role(flags), model, flags, dict(env)))
            if len(commands) > MAX_COMMANDS:
                raise UsageError(f"--upstream: more than {MAX_COMMANDS} vllm serve commands")
    return commands


def _normal(flags: dict[str, str]) -> dict[str, str]:
    """Flatten JSON values key by key and leave out what the layout's facts carry."""
    out: dict[str, str] = {}
    for name, value in flags.items():
        if not (name in FACT_FLAGS or name in _SPINE_FLAGS or _PER_RANK.match(value)):
            put_flag(out, name, value, strip=True)
    return out


def _path_parts(value: str, name: str) -> str:
    """``$X:/a/:/b`` and a typed prepend read alike: the added parts, then ``(+$X)``."""
    parts = [
        p.rstrip("/") or "/"
        for p in value.split(":")
        if p and p not in (f"${name}", f"${{{name}}}")
    ]
    keeps = f"${name}" in value or f"${{{name}}}" in value
    return ":".join(parts) + (f" (+${name})" if keeps else "")


def layout_env(p: ProcessPlan) -> dict[str, str]:
    """The layout's environment as the tutorial would write it."""
    out: dict[str, str] = {}
    for name, value in env_of(p).items():
        try:
            typed = json.loads(value) if value.startswith("{") else None
        except ValueError:
            typed = None
        if isinstance(typed, dict) and "prepend" in typed:
            out[name] = _path_parts(f"{typed['prepend']}:${name}", name)
        else:
            out[name] = value
    return out


def upstream_env(env: dict[str, str]) -> dict[str, str]:
    return {
        k: (_path_parts(v, k) if f"${k}" in v or f"${{{k}}}" in v else v) for k, v in env.items()
    }


@dataclass
class RoleDrift:
    role: str
    upstream_line: int | None
    flags: list[Change] = field(default_factory=list)
    env: list[Change] = field(default_factory=list)
    recorded: set[str] = field(default_factory=set)


@dataclass
class DriftReport:
    name: str
    source: str
    upstream: str
    roles: list[RoleDrift]

    def moved(self) -> int:
        return sum(
            1
            for r in self.roles
            for c in [*r.flags, *r.env]
            if c.key.split(".")[0] not in r.recorded
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "layout": self.name,
            "source": self.source,
            "upstream": self.upstream,
            "moved": self.moved(),
            "roles": {
                r.role: {
                    "upstream_line": r.upstream_line,
                    "flags": [
                        {**c.as_json(), "recorded": c.key.split(".")[0] in r.recorded}
                        for c in r.flags
                    ],
                    "env": [{**c.as_json(), "recorded": c.key in r.recorded} for c in r.env],
                }
                for r in self.roles
            },
        }


def _best(cands: list[UpstreamCommand], p: ProcessPlan) -> UpstreamCommand:
    want = (str(p.dp_size or 1), str(p.tp))

    def score(c: UpstreamCommand) -> int:
        got = (c.flags.get("--data-parallel-size", "1"), c.flags.get("--tensor-parallel-size", "1"))
        return sum(1 for a, b in zip(want, got, strict=True) if a == b or _PER_RANK.match(b))

    return max(cands, key=score)


def tutorial_in_checkout(checkout: Path, source: str) -> Path:
    """``<Model>.html`` of the layout's source URL -> that page's markdown in a docs checkout."""
    stem = source.rstrip("/").rsplit("/", 1)[-1].removesuffix(".html")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._ &-]{0,100}", stem):
        raise UsageError(
            f"--upstream {checkout}: the layout's source {source[:80]!r} names no tutorial page; "
            "give the tutorial's file instead of the checkout"
        )
    for rel in (
        f"docs/source/tutorials/models/{stem}.md",
        f"tutorials/models/{stem}.md",
        f"models/{stem}.md",
        f"{stem}.md",
    ):
        if (checkout / rel).is_file():
            return checkout / rel
    raise UsageError(
        f"--upstream {checkout}: no {stem}.md under docs/source/tutorials/models; "
        "give the tutorial's file instead"
    )


def drift_report(name: str, upstream: Path, catalog: Path | None) -> DriftReport:
    loaded = load(name, catalog)
    layout = loaded.layout
    plan = build_plan(layout)
    if upstream.is_dir():
        upstream = tutorial_in_checkout(upstream, layout.provenance.source)
    commands = parse_upstream(_read(upstream))
    if not commands:
        raise UsageError(
            f"--upstream {upstream}: no 'vllm serve' command found; save the tutorial's shell "
            "blocks (or give its docs markdown)"
        )
    prov = layout.provenance
    deviations = (*prov.deviations, *prov.source_deviations)
    recorded = {name for d in deviations for name in (d.flag, d.env) if name}
    roles: list[RoleDrift] = []
    for role in ROLES:
        procs = [p for p in plan.processes if p.role == role and p.kind == "engine"]
        if not procs:
            continue
        cands = [c for c in commands if c.role == role]
        if not cands:
            roles.append(RoleDrift(role, None))
            continue
        up = _best(cands, procs[0])
        mine_flags = {
            k: v for k, v in flags_of(procs[0]).items() if k != "(args)" and k not in _SPINE_FLAGS
        }
        mine_env = {k: v for k, v in layout_env(procs[0]).items() if k not in _CONVENTION_ENV}
        up_env = {k: v for k, v in upstream_env(up.env).items() if k not in _CONVENTION_ENV}
        roles.append(
            RoleDrift(
                role,
                up.line,
                changes(mine_flags, _normal(up.flags)),
                changes(mine_env, up_env),
                recorded,
            )
        )
    return DriftReport(layout.name, prov.source, str(upstream), roles)


def print_drift(report: DriftReport, console: Console | None = None) -> None:
    out = console or Console()
    out.print(f"{report.name}: from {report.source}\nupstream: {report.upstream}", highlight=False)
    for r in report.roles:
        if r.upstream_line is None:
            out.print(f"{r.role}: no upstream command of this role", highlight=False)
            continue
        rows = []
        for kind, items in (("flag", r.flags), ("env", r.env)):
            for c in items:
                mark = "recorded deviation" if c.key.split(".")[0] in r.recorded else "moved"
                rows.append([kind, c.key, c.a or "-", c.b or "-", mark])
        title = f"{r.role} (upstream line {r.upstream_line}): layout vs upstream"
        if not rows:
            out.print(f"{title}: no difference", highlight=False)
            continue
        for t in fit_tables(out, ["kind", "name", "layout", "upstream", "what"], rows, title):
            out.print(t)
    out.print(f"moved: {report.moved()}", highlight=False)
