"""Compare two sets of process facts and say, readably, how they differ.

``compare(expected, actual)`` matches processes by ``keyed`` (node, kind, DP rank
or API port) and reports, per process: missing or extra processes, flags missing,
extra or changed, environment variables missing, extra or changed, the working
directory and the program words. Flags are compared by name (order does not
matter; a repeated flag compares its values in order); JSON values are compared
as parsed data, and a changed object says which keys differ. Counts are per flag
name and per variable of each process, so "0 flag diffs, 0 env diffs" means
faithful; processes with the very same differences are printed as one block.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from servekit.importer.platform.normalize import JSONValue, ProcessFacts, keyed


@dataclass
class FactsDiff:
    """The differences between two fact sets; ``text`` is the readable report."""

    matched: int = 0
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    flag_diffs: int = 0
    env_diffs: int = 0
    cwd_diffs: int = 0
    program_diffs: int = 0
    lines: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (
            self.missing
            or self.extra
            or self.flag_diffs
            or self.env_diffs
            or self.cwd_diffs
            or self.program_diffs
        )

    def summary(self) -> str:
        return (
            f"{self.matched} processes matched, {len(self.missing)} missing, "
            f"{len(self.extra)} extra; {self.flag_diffs} flag diffs, {self.env_diffs} env diffs, "
            f"{self.cwd_diffs} cwd diffs, {self.program_diffs} program diffs"
        )

    @property
    def text(self) -> str:
        return "\n".join([self.summary(), *self.lines])


def show(value: JSONValue) -> str:
    """A value as the diff prints it: strings bare, JSON compact with types visible."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def _show_values(values: tuple[JSONValue, ...] | None) -> str:
    if values is None:
        return "(absent)"
    if not values:
        return "(boolean)"
    return " ".join(show(v) for v in values)


def _show_all(occurrences: list[tuple[JSONValue, ...]] | None) -> str:
    if not occurrences:
        return _show_values(None)
    return " | ".join(_show_values(v) for v in occurrences)


def _json_detail(old: Any, new: Any, path: str = "") -> list[str]:
    """Key-by-key differences of two JSON objects (nested), for readable diffs."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [f"{path or '.'}: {json.dumps(old)} -> {json.dumps(new)}"]
    out: list[str] = []
    for key in sorted(set(old) | set(new)):
        sub = f"{path}.{key}"
        if key not in new:
            out.append(f"{sub}: missing (expected {json.dumps(old[key])})")
        elif key not in old:
            out.append(f"{sub}: extra {json.dumps(new[key])}")
        elif old[key] != new[key] or type(old[key]) is not type(new[key]):
            out.extend(_json_detail(old[key], new[key], sub))
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON: ``1 == True`` and ``1 == 1.0`` do not count as equal."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _flag_diffs(exp: ProcessFacts, act: ProcessFacts) -> list[list[str]]:
    """One entry (its printed lines) per flag name that differs."""
    want, got = exp.flag_values(), act.flag_values()
    diffs: list[list[str]] = []
    for name in sorted(set(want) | set(got)):
        old, new = want.get(name), got.get(name)
        if old is not None and new is not None and _same(old, new):
            continue
        if new is None:
            diffs.append([f"  flag missing {name} {_show_all(old)}"])
        elif old is None:
            diffs.append([f"  flag extra   {name} {_show_all(new)}"])
        else:
            diffs.append(_changed_flag(name, old, new))
    return diffs


def _changed_flag(
    name: str, old: list[tuple[JSONValue, ...]], new: list[tuple[JSONValue, ...]]
) -> list[str]:
    if len(old) == len(new) == 1 and len(old[0]) == len(new[0]) == 1:
        a, b = old[0][0], new[0][0]
        if isinstance(a, dict) and isinstance(b, dict):
            return [f"  flag changed {name}:", *(f"      {d}" for d in _json_detail(a, b))]
        return [f"  flag changed {name}: {show(a)} -> {show(b)}"]
    return [f"  flag changed {name}: {_show_all(old)} -> {_show_all(new)}"]


def _env(value: str | None) -> str:
    return "(unset)" if value is None else value


def _env_lines(exp: ProcessFacts, act: ProcessFacts) -> list[str]:
    lines: list[str] = []
    for name in sorted(set(exp.env) | set(act.env)):
        if name not in act.env:
            lines.append(f"  env missing  {name}={_env(exp.env[name])}")
        elif name not in exp.env:
            lines.append(f"  env extra    {name}={_env(act.env[name])}")
        elif exp.env[name] != act.env[name]:
            lines.append(f"  env changed  {name}: {_env(exp.env[name])} -> {_env(act.env[name])}")
    return lines


def _compare_process(exp: ProcessFacts, act: ProcessFacts, diff: FactsDiff) -> list[str]:
    """The diff lines of one matched pair (counted into ``diff``)."""
    flag_diffs, env = _flag_diffs(exp, act), _env_lines(exp, act)
    flags = [line for lines in flag_diffs for line in lines]
    lines = []
    if exp.program != act.program:
        diff.program_diffs += 1
        lines.append(f"  program: {' '.join(exp.program)} -> {' '.join(act.program)}")
    if exp.cwd != act.cwd:
        diff.cwd_diffs += 1
        lines.append(f"  cwd: {exp.cwd} -> {act.cwd}")
    diff.flag_diffs += len(flag_diffs)
    diff.env_diffs += len(env)
    return lines + flags + env


def _grouped(blocks: dict[str, list[str]]) -> list[str]:
    """One block per distinct diff, headed by every process that has it."""
    by_lines: dict[tuple[str, ...], list[str]] = {}
    for key, lines in blocks.items():
        by_lines.setdefault(tuple(lines), []).append(key)
    out: list[str] = []
    for shared, keys in by_lines.items():
        out.append(", ".join(keys) + ":")
        out.extend(shared)
    return out


def compare(expected: Sequence[ProcessFacts], actual: Sequence[ProcessFacts]) -> FactsDiff:
    """How ``actual`` differs from ``expected`` (e.g. source fixture vs servekit's Plan)."""
    want, got = keyed(expected), keyed(actual)
    diff = FactsDiff()
    blocks: dict[str, list[str]] = {}
    for key in want:
        if key not in got:
            diff.missing.append(key)
            diff.lines.append(f"{key}: missing (expected {' '.join(want[key].program)})")
            continue
        diff.matched += 1
        lines = _compare_process(want[key], got[key], diff)
        if lines:
            blocks[key] = lines
    for key in got:
        if key not in want:
            diff.extra.append(key)
            diff.lines.append(f"{key}: extra ({' '.join(got[key].program)})")
    diff.lines.extend(_grouped(blocks))
    return diff
