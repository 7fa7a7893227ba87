"""A vLLM-compatible engine simulator: many endpoints, one process, virtual time.

Public API: :class:`SimSpec` (what to serve), :func:`serve` (start in a running
loop), :func:`run` (block until SIGTERM/SIGINT) and, for tests,
:func:`servekit.sim.testing.running_sim`. See docs/sim.md.
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.sim.faults import FaultSpec
    from servekit.sim.metrics import SIM_INFO, SIM_VERSION
    from servekit.sim.options import SimOptions, quick_spec, run_options
    from servekit.sim.profile import Profile, load_profile
    from servekit.sim.server import SimServer, run, serve
    from servekit.sim.spec import EndpointSpec, SimSpec, load_spec, spec_from_mapping
    from servekit.sim.testing import RunningSim, running_sim
    from servekit.sim.vllmserve import serve_main

__getattr__, __dir__ = lazy_face(__name__)
__all__ = [
    "SIM_INFO",
    "SIM_VERSION",
    "EndpointSpec",
    "FaultSpec",
    "Profile",
    "RunningSim",
    "SimOptions",
    "SimServer",
    "SimSpec",
    "load_profile",
    "load_spec",
    "quick_spec",
    "run",
    "run_options",
    "running_sim",
    "serve",
    "serve_main",
    "spec_from_mapping",
]
