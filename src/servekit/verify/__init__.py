"""servekit.verify: one command from layout to release report.

up (or attach) -> accept -> bench -> kit -> down -> report -> ledger. The flow
knows its parts only through small Protocols (:mod:`servekit.verify.components`),
bound to servekit's real runner, acceptance suite, benchmark and kit verifier in
:mod:`servekit.verify.adapters`. It sits above local, accept, bench, kit and
report; report only renders what a run left behind.
"""

from servekit.verify.adapters import real_components
from servekit.verify.components import Components
from servekit.verify.options import VerifyOptions
from servekit.verify.run import VerifyOutcome, verify

__all__ = ["Components", "VerifyOptions", "VerifyOutcome", "real_components", "verify"]
