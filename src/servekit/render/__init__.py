"""servekit.render: from a layout to what runs, the Plan, and its rendered forms.

:func:`build_plan` turns a validated layout into every process on every node
(argv, env, devices, ports and typed facts); the rules check a layout against
its Plan; the shell renderers write it out as launch scripts for a target
(``modelarts``: one entry every node runs; ``nodes``: a folder per node).
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.render.plan import (
        NodePlan,
        Plan,
        PlanOptions,
        ProcessPlan,
        ProxyFacts,
        build_plan,
        planned_ports,
    )
    from servekit.render.rules import Finding, check_layout
    from servekit.render.shell import render_files, write_rendering

_NAMES = {
    "Finding": "rules",
    "NodePlan": "plan",
    "Plan": "plan",
    "PlanOptions": "plan",
    "ProcessPlan": "plan",
    "ProxyFacts": "plan",
    "build_plan": "plan",
    "check_layout": "rules",
    "planned_ports": "plan",
    "render_files": "shell",
    "write_rendering": "shell",
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)
__all__ = [
    "Finding",
    "NodePlan",
    "Plan",
    "PlanOptions",
    "ProcessPlan",
    "ProxyFacts",
    "build_plan",
    "check_layout",
    "planned_ports",
    "render_files",
    "write_rendering",
]
