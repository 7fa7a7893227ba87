"""servekit.render: from a layout to what runs, the Plan, and its rendered forms.

:func:`build_plan` turns a validated layout into every process on every node
(argv, env, devices, ports and typed facts); the rules check a layout against
its Plan; the shell renderers write it out as launch scripts.
"""

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
]
