"""A vLLM-compatible engine simulator: many endpoints, one process, virtual time.

Public API: :class:`SimSpec` (what to serve), :func:`serve` (start in a running
loop), :func:`run` (block until SIGTERM/SIGINT) and, for tests,
:func:`servekit.sim.testing.running_sim`. See docs/sim.md.
"""

from __future__ import annotations

from servekit.sim.faults import FaultSpec
from servekit.sim.options import quick_spec
from servekit.sim.profile import Profile, load_profile
from servekit.sim.server import SimServer, run, serve
from servekit.sim.spec import EndpointSpec, SimSpec, load_spec

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
