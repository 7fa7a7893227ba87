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

_NAMES = {
    "EndpointSpec": "spec",
    "FaultSpec": "faults",
    "Profile": "profile",
    "RunningSim": "testing",
    "SIM_INFO": "metrics",
    "SIM_VERSION": "metrics",
    "SimOptions": "options",
    "SimServer": "server",
    "SimSpec": "spec",
    "load_profile": "profile",
    "load_spec": "spec",
    "quick_spec": "options",
    "run": "server",
    "run_options": "options",
    "running_sim": "testing",
    "serve": "server",
    "serve_main": "vllmserve",
    "spec_from_mapping": "spec",
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)
__all__ = [
    "EndpointSpec",
    "FaultSpec",
    "Profile",
    "RunningSim",
    "SIM_INFO",
    "SIM_VERSION",
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
