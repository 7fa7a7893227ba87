"""servekit.preflight: every node checked before launch, and the nodes compared.

:mod:`.spec` derives from the Plan what each unit (a node, or a pod) needs
there; :mod:`.node` is the program every platform ships beside its scripts and
runs before the engines (standard library, Python 3.8): devices present and
free, NPU links and health as the source's ``check_hccn.sh`` checks them, NPU
IPs, super pod IDs, TLS and HCCN settings equal across nodes, the peers' NPU
IPs reached, the ports free, the model and the driver's tools present.
:mod:`.record` reads a deployment's report back (``verify`` records it);
:mod:`.api` is ``servekit preflight``.
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.preflight.api import run_preflight as run_preflight
    from servekit.preflight.options import PreflightOptions as PreflightOptions
    from servekit.preflight.record import (
        PreflightRecord as PreflightRecord,
        read_preflight as read_preflight,
    )
    from servekit.preflight.spec import (
        ENTRY_FILE as ENTRY_FILE,
        PLATFORM_OF as PLATFORM_OF,
        PORT_BASE as PORT_BASE,
        SPEC_FILE as SPEC_FILE,
        Unit as Unit,
        checker_files as checker_files,
        node_units as node_units,
        peers as peers,
        preflight_files as preflight_files,
        spec_doc as spec_doc,
    )

__getattr__, __dir__ = lazy_face(__name__)
