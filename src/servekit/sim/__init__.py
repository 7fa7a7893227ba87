"""A vLLM-compatible engine simulator: many endpoints, one process, virtual time.

Public API: :class:`SimSpec` (what to serve), :func:`serve` (start in a running
loop), :func:`run` (block until SIGTERM/SIGINT) and, for tests,
:func:`servekit.sim.testing.running_sim`. See docs/sim.md.
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.sim.engine import Engine as Engine, Seq as Seq
    from servekit.sim.faults import FaultSpec as FaultSpec
    from servekit.sim.metrics import SIM_INFO as SIM_INFO, SIM_VERSION as SIM_VERSION
    from servekit.sim.options import (
        SimOptions as SimOptions,
        quick_spec as quick_spec,
        run_options as run_options,
    )
    from servekit.sim.profile import Profile as Profile, load_profile as load_profile
    from servekit.sim.server import SimServer as SimServer, run as run, serve as serve
    from servekit.sim.spec import (
        EndpointSpec as EndpointSpec,
        SimSpec as SimSpec,
        load_spec as load_spec,
        spec_from_mapping as spec_from_mapping,
    )
    from servekit.sim.testing import RunningSim as RunningSim, running_sim as running_sim
    from servekit.sim.virtual import (
        VirtualClock as VirtualClock,
        VirtualStall as VirtualStall,
        run_virtual as run_virtual,
        virtual_engine as virtual_engine,
    )
    from servekit.sim.vllmserve import serve_main as serve_main

__getattr__, __dir__ = lazy_face(__name__)
