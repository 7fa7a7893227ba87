"""The platform table: one row per render target, each row its folder's :data:`PLATFORM`.

A fourth platform (Slurm, Volcano) is one folder beside ``modelarts/``, ``nodes/``
and ``k8s/`` whose ``__init__.py`` builds a :class:`~servekit.platforms.platform.Platform`
(renderer, start commands, fake, attach, flags, summary), and one row here.
Everything else asks this table: ``servekit render``'s ``--target`` choices and
its platform flags (:mod:`.options`), the plan page, the report's "how to use
it", ``verify``/``deployment``'s attach flags and the dry-run fakes
(``tests/platforms/test_toy_platform.py`` adds a platform this way and checks
that nothing else needs to change).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from servekit.catalog import Layout
from servekit.errors import UsageError
from servekit.platforms.k8s import PLATFORM as K8S
from servekit.platforms.modelarts import PLATFORM as MODELARTS
from servekit.platforms.nodes import PLATFORM as NODES
from servekit.platforms.platform import Attach, Platform, Start
from servekit.platforms.request import Files, RenderRequest
from servekit.render import Plan

PLATFORMS: dict[str, Platform] = {p.name: p for p in (MODELARTS, NODES, K8S)}
"""The rows, the default target first."""
TARGETS: tuple[str, ...] = tuple(PLATFORMS)
DEFAULT_TARGET = TARGETS[0]

if TYPE_CHECKING:
    TargetName = str
else:
    TargetName = Literal[TARGETS]
    """The CLI's choice list: the table's names (a pydantic Literal at run time)."""


def platform(name: str) -> Platform:
    """The row of ``name``, or one line naming the choices."""
    if name not in PLATFORMS:
        raise UsageError(f"--target {name}: no such platform; choose one of {', '.join(TARGETS)}")
    return PLATFORMS[name]


def attaches() -> list[tuple[Platform, Attach]]:
    """The platforms with an attach flag of their own, in table order."""
    return [(p, p.attach) for p in PLATFORMS.values() if p.attach is not None]


def start_steps(plan: Plan, target: str, out: str) -> tuple[str, Start]:
    """The render command that writes ``plan`` for ``target`` to ``out``, and how it starts."""
    return (
        f"servekit render {plan.layout} --target {target} --out {out}",
        platform(target).start(plan, out),
    )


def render_files(
    plan: Plan,
    target: TargetName = DEFAULT_TARGET,
    layout: Layout | None = None,
    settings: dict[str, str] | None = None,
    *,
    preflight: bool = True,
) -> Files:
    """Every rendered file of a Plan for one platform, by relative path (pure)."""
    req = RenderRequest(plan, layout, settings or {}, preflight)
    return platform(target).render(req)


def write_rendering(
    plan: Plan,
    out: Path,
    target: TargetName = DEFAULT_TARGET,
    *,
    force: bool = False,
    preflight: bool = True,
) -> list[Path]:
    """Write one platform's rendering to ``out`` atomically (whole or not at all)."""
    from servekit.render import write_files

    return write_files(render_files(plan, target, preflight=preflight), out, force=force)
