"""servekit.render: from a layout to what runs, the Plan, and its rendered forms.

:func:`build_plan` turns a validated layout into every process on every node
(argv, env, devices, ports and typed facts); the rules check a layout against
its Plan; the shell helpers write each process's script, which every platform
(:mod:`servekit.platforms`) ships in its own launch model.
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.render.bundle import bundle_files as bundle_files, write_bundle as write_bundle
    from servekit.render.command import (
        Arg as Arg,
        NodeRef as NodeRef,
        Part as Part,
        Ref as Ref,
        Word as Word,
        joined as joined,
        referenced_nodes as referenced_nodes,
        references as references,
        resolved_argv as resolved_argv,
        shell_words as shell_words,
    )
    from servekit.render.envvalues import AddressUrl as AddressUrl, resolve_env as resolve_env
    from servekit.render.overrides import (
        apply_overrides as apply_overrides,
        assign_path as assign_path,
        parse_set as parse_set,
    )
    from servekit.render.plan import (
        NodePlan as NodePlan,
        Plan as Plan,
        PlanOptions as PlanOptions,
        PortMap as PortMap,
        ProcessPlan as ProcessPlan,
        build_plan as build_plan,
        planned_ports as planned_ports,
    )
    from servekit.render.rules import (
        Finding as Finding,
        check_layout as check_layout,
        port_bindings as port_bindings,
        reserved_ports as reserved_ports,
        source_caveat as source_caveat,
        topology_of as topology_of,
    )
    from servekit.render.shell import (
        device_span as device_span,
        plan_page as plan_page,
        process_needs as process_needs,
        process_script as process_script,
        script_environment as script_environment,
        uses_nic as uses_nic,
        write_files as write_files,
    )
    from servekit.render.views import (
        list_json as list_json,
        model_of as model_of,
        print_defaults as print_defaults,
        print_list as print_list,
        print_show as print_show,
        run_check as run_check,
        source_claim as source_claim,
    )
    from servekit.render.wiring import (
        Address as Address,
        Bootstrap as Bootstrap,
        HostOf as HostOf,
        ProxyWiring as ProxyWiring,
        kv_events_switch as kv_events_switch,
        proxy_words as proxy_words,
        script_host as script_host,
        url as url,
        url_word as url_word,
    )

__getattr__, __dir__ = lazy_face(__name__)
