"""servekit.verify: one command from layout to release report.

up (or attach) -> accept -> bench -> kit -> down -> report -> ledger. The flow
knows its parts only through small Protocols (:mod:`servekit.verify.components`),
bound to servekit's real runner, acceptance suite, benchmark and kit verifier in
:mod:`servekit.verify.adapters`. It sits above local, accept, bench, kit and
report; report only renders what a run left behind. A cluster started from the
rendered scripts is attached to through :mod:`servekit.verify.cluster` (the Plan
plus the node addresses, or the proxy's engine-metrics relay).

The names below are imported on first use, so the CLI can build ``servekit
verify`` from :class:`VerifyOptions` without loading the engine stack.
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.verify.adapters import real_components as real_components
    from servekit.verify.cluster import (
        cluster_deployment as cluster_deployment,
        relay_deployment as relay_deployment,
        write_deployment as write_deployment,
    )
    from servekit.verify.components import Components as Components
    from servekit.verify.options import (
        DeploymentOptions as DeploymentOptions,
        VerifyOptions as VerifyOptions,
    )
    from servekit.verify.run import VerifyOutcome as VerifyOutcome, main as main, verify as verify

__getattr__, __dir__ = lazy_face(__name__)
