"""The kit's promises (MANIFEST.json ``expect``) checked against the files it ships.

Three groups, each a row of ``kit verify``:

- ``defaults``: every ``NAME=${NAME:-value}`` in a shipped shell script whose
  ``NAME`` is promised must carry the promised value for the script's role,
  and each promise must be set by at least one script of that role;
- ``gates``: the default a shipped file gives a variable
  (``os.environ.get(NAME, "1")``, or ``NAME=${NAME:-1}`` in a script);
- ``markers``: literal text a shipped file must contain.

A script's role is ``expect.roles[path]`` when the kit names it, else its
name: ``decode`` or ``prefill`` in the path (exactly one of them), else
``mixed``. Every mismatch is named: file, line, variable, promised, found.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from servekit.kit.checks import CheckResult, counted, skipped
from servekit.kit.models import KIT_ROLES, Gate, KitExpect, Marker, RoleValues
from servekit.kit.pydefaults import python_defaults
from servekit.kit.scriptdefaults import find_defaults, is_shell_script, script_role
from servekit.vocabulary import Role

NO_PROMISES = (
    "the kit declares no promises (built without an expect: section):"
    " script defaults, gates and markers are not checked"
)


@dataclass(frozen=True)
class Shipped:
    """What verify read from the kit's layers: file bytes, payload paths, files too large."""

    files: Mapping[str, bytes]
    payload: Collection[str]
    too_large: Collection[str] = ()


def role_of(path: str, expect: KitExpect) -> Role:
    """The script's role: the kit's explicit mapping, else its name."""
    return expect.roles.get(path) or script_role(path)


def check_expect(expect: KitExpect | None, shipped: Shipped) -> list[CheckResult]:
    """The ``defaults``, ``gates`` and ``markers`` rows (one ``expect`` skip row without promises)."""
    if expect is None:
        return [skipped("expect", NO_PROMISES)]
    return [_defaults(expect, shipped), _gates(expect, shipped), _markers(expect, shipped)]


def _units(expect: KitExpect) -> list[tuple[str, Role | None, str]]:
    """Each promise as (variable, role or None for every role, value)."""
    out: list[tuple[str, Role | None, str]] = []
    for name, promise in sorted(expect.defaults.items()):
        if isinstance(promise, RoleValues):
            out += [(name, r, v) for r in KIT_ROLES if (v := promise.for_role(r)) is not None]
        else:
            out.append((name, None, promise))
    return out


def _label(name: str, role: Role | None) -> str:
    return f"{name} ({role})" if role else name


def _defaults(expect: KitExpect, shipped: Shipped) -> CheckResult:
    units = _units(expect)
    if not units:
        return skipped("defaults", "no script defaults promised")
    found: dict[tuple[str, Role | None], list[tuple[str, int, str]]] = {}
    scripts = sorted(p for p, d in shipped.files.items() if is_shell_script(p, d))
    for path in scripts:
        role = role_of(path, expect)
        for hit in find_defaults(path, shipped.files[path].decode("utf-8", "replace")):
            promise = expect.defaults.get(hit.name)
            key: tuple[str, Role | None] = (
                hit.name,
                role if isinstance(promise, RoleValues) else None,
            )
            found.setdefault(key, []).append((path, hit.line, hit.value))
    problems, items = _unmapped_roles(expect, scripts), []
    kept = 0
    for name, unit_role, want in units:
        hits = found.get((name, unit_role), [])
        bad = [
            f"{p}:{line}: {name} promised {want!r}, found {v!r}" for p, line, v in hits if v != want
        ]
        if not hits:
            where = f"{unit_role} " if unit_role else ""
            bad.append(
                f"{_label(name, unit_role)}: promised {want!r}, no shipped {where}script sets it"
            )
        problems += bad
        kept += not bad
        items += [
            f"{'ok' if v == want else 'FAIL'} {p}:{line}: {_label(name, unit_role)}"
            f" promised {want!r}, found {v!r}"
            for p, line, v in hits
        ]
    return counted(
        "defaults", kept, len(units), problems, items, what="script defaults as promised"
    )


def _unmapped_roles(expect: KitExpect, scripts: list[str]) -> list[str]:
    return [
        f"expect.roles: {path} is not a shell script this kit ships"
        for path in sorted(expect.roles)
        if path not in scripts
    ]


def _file_problem(path: str, shipped: Shipped) -> str | None:
    if path in shipped.too_large:
        return f"{path}: too large to check here (16 MiB per file)"
    if path not in shipped.payload or path not in shipped.files:
        return f"{path}: not a file this kit ships (verify sees only the working layers)"
    return None


def _gate_values(gate: Gate, data: bytes) -> list[tuple[int, str]] | str:
    """(line, default) pairs for the gate's variable, or why there are none."""
    if is_shell_script(gate.file, data):
        hits = find_defaults(gate.file, data.decode("utf-8", "replace"))
        return [(h.line, h.value) for h in hits if h.name == gate.name]
    found = python_defaults(data, gate.name)
    if found is None:
        return f"{gate.file}: does not parse as Python, so {gate.name}'s default cannot be read"
    return [(d.line, d.value) for d in found]


def _gates(expect: KitExpect, shipped: Shipped) -> CheckResult:
    if not expect.gates:
        return skipped("gates", "no gates promised")
    problems, items = [], []
    kept = 0
    for gate in expect.gates:
        problem = _file_problem(gate.file, shipped)
        values = _gate_values(gate, shipped.files[gate.file]) if problem is None else problem
        if isinstance(values, str):
            bad = [values]
        else:
            bad = [
                f"{gate.file}:{line}: {gate.name} promised {gate.default!r}, found {value!r}"
                for line, value in values
                if value != gate.default
            ]
            if not values:
                bad.append(f"{gate.file}: no default for {gate.name} (environ.get/getenv)")
            items += [
                f"{gate.file}:{line}: {gate.name} default {value!r}" for line, value in values
            ]
        problems += bad
        kept += not bad
    return counted(
        "gates", kept, len(expect.gates), problems, items, what="gate defaults as promised"
    )


def _marker_problem(marker: Marker, shipped: Shipped) -> str | None:
    problem = _file_problem(marker.file, shipped)
    if problem is None and marker.contains.encode("utf-8") not in shipped.files[marker.file]:
        problem = f"{marker.file}: does not contain {marker.contains!r}"
    return problem


def _markers(expect: KitExpect, shipped: Shipped) -> CheckResult:
    if not expect.markers:
        return skipped("markers", "no markers promised")
    problems = [p for m in expect.markers if (p := _marker_problem(m, shipped)) is not None]
    items = [
        f"{'FAIL' if _marker_problem(m, shipped) else 'ok'} {m.file} contains {m.contains!r}"
        for m in expect.markers
    ]
    kept = len(expect.markers) - len(problems)
    return counted("markers", kept, len(expect.markers), problems, items, what="markers in place")
