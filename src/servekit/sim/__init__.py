"""A vLLM-compatible engine simulator: many endpoints, one process, virtual time.

Public API: :class:`SimSpec` (what to serve), :func:`serve` (start in a running
loop), :func:`run` (block until SIGTERM/SIGINT) and, for tests,
:func:`servekit.sim.testing.running_sim`. See docs/sim.md.
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.sim.faults import FaultSpec
    from servekit.sim.options import quick_spec
    from servekit.sim.profile import Profile, load_profile
    from servekit.sim.server import SimServer, run, serve
    from servekit.sim.spec import EndpointSpec, SimSpec, load_spec

_NAMES = {
    "EndpointSpec": "spec",
    "FaultSpec": "faults",
    "Profile": "profile",
    "SimServer": "server",
    "SimSpec": "spec",
    "load_profile": "profile",
    "load_spec": "spec",
    "quick_spec": "options",
    "run": "server",
    "serve": "server",
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)
__all__ = [
    "EndpointSpec",
    "FaultSpec",
    "Profile",
    "SimServer",
    "SimSpec",
    "load_profile",
    "load_spec",
    "quick_spec",
    "run",
    "serve",
]
