"""servekit.render: from a layout to what runs, the Plan, and its rendered forms.

:func:`build_plan` turns a validated layout into every process on every node
(argv, env, devices, ports and typed facts); the rules check a layout against
its Plan; the shell renderers write it out as launch scripts for a target
(``modelarts``: one entry every node runs; ``nodes``: a folder per node).
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.render.api import render_layout
    from servekit.render.bundle import write_bundle
    from servekit.render.envvalues import resolve_env
    from servekit.render.options import RenderOptions
    from servekit.render.overrides import assign_path, parse_set
    from servekit.render.plan import (
        NodePlan,
        Plan,
        PlanOptions,
        ProcessPlan,
        ProxyFacts,
        build_plan,
        planned_ports,
    )
    from servekit.render.rules import PD_NAME, Finding, check_layout, topology_of
    from servekit.render.shell import render_files, write_rendering
    from servekit.render.views import (
        list_json,
        model_of,
        print_defaults,
        print_list,
        print_show,
        run_check,
        source_claim,
    )

__getattr__, __dir__ = lazy_face(__name__)
__all__ = [
    "PD_NAME",
    "Finding",
    "NodePlan",
    "Plan",
    "PlanOptions",
    "ProcessPlan",
    "ProxyFacts",
    "RenderOptions",
    "assign_path",
    "build_plan",
    "check_layout",
    "list_json",
    "model_of",
    "parse_set",
    "planned_ports",
    "print_defaults",
    "print_list",
    "print_show",
    "render_files",
    "render_layout",
    "resolve_env",
    "run_check",
    "source_claim",
    "topology_of",
    "write_bundle",
    "write_rendering",
]
