"""servekit.report: ``servekit verify``, the release report and the catalog site.

``verify`` joins up, accept, bench and kit into one run folder, writes the
report from that folder's files (:func:`build_report`) and records a passing
run in the layout's verification ledger. ``build_site`` writes the catalog.
"""

from servekit.report.adapters import real_components
from servekit.report.build import build_report
from servekit.report.components import Components
from servekit.report.models import VerifyRun
from servekit.report.site import build_site
from servekit.report.verify import VerifyOptions, VerifyOutcome, verify

__all__ = [
    "Components",
    "VerifyOptions",
    "VerifyOutcome",
    "VerifyRun",
    "build_report",
    "build_site",
    "real_components",
    "verify",
]
