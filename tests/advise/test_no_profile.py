"""The fitted model never reads the simulator's profiles: it has no way to.

``servekit.advise`` takes from the simulator only its engine (scheduler, KV
cache, virtual time) and the ``Profile`` model it fills with a fit; no module
of it imports a profile loader, names the profiles' package or names a
shipped profile. The live half of the proof (a calibration against an engine
of a made-up profile with every loader made to fail, and a control engine
whose fit moves with it) is ``test_calibrate_sim.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from servekit.sim.profile import builtin_profile_names

ADVISE = Path(__file__).resolve().parents[2] / "src" / "servekit" / "advise"
LOADERS = {"load_profile", "profile_from_mapping", "builtin_profile_names", "PROFILE_PACKAGE"}
MODULES = {"servekit.sim.profile", "servekit.sim.profiles"}


def readers(source: str) -> list[str]:
    """What in a module could read a simulator profile: loaders, their module, a name."""
    found: list[str] = []
    shipped = set(builtin_profile_names())
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("servekit.sim"):
            if node.module in MODULES:
                found.append(f"imports {node.module}")
            found += [f"imports {a.name}" for a in node.names if a.name in LOADERS]
        elif isinstance(node, ast.Import):
            found += [f"imports {a.name}" for a in node.names if a.name in MODULES]
        elif isinstance(node, ast.Attribute) and node.attr in LOADERS:
            found.append(f"uses .{node.attr}")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and (node.value in shipped or "sim.profiles" in node.value)
        ):
            found.append(f"names {node.value!r}")
    return found


def test_no_module_of_the_advisor_can_read_a_simulator_profile() -> None:
    files = sorted(ADVISE.rglob("*.py"))
    assert len(files) > 10
    found = {str(p.relative_to(ADVISE)): readers(p.read_text()) for p in files}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_check_sees_every_way_in() -> None:
    planted = (
        "from servekit.sim import load_profile\n"
        "import servekit.sim.profile\n"
        "from servekit.sim.profile import Profile\n"
        "import servekit.sim as s\n"
        "s.profile_from_mapping({})\n"
        "NAME = 'a3-dsv4-flash'\n"
        "WHERE = 'servekit.sim.profiles'\n"
    )
    assert sorted(readers(planted)) == [
        "imports load_profile",
        "imports servekit.sim.profile",
        "imports servekit.sim.profile",
        "names 'a3-dsv4-flash'",
        "names 'servekit.sim.profiles'",
        "uses .profile_from_mapping",
    ]
