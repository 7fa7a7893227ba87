"""servekit.report: the release report of a verify run folder, and the catalog site.

The report is rebuilt from the files a run left (:func:`build_report`), so it
renders the same whoever ran the run; ``build_site`` writes the catalog as a
static site. Running a verification is :mod:`servekit.verify`'s job.
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.report.build import RUN_FILE as RUN_FILE, build_report as build_report
    from servekit.report.evidence import write_sums as write_sums
    from servekit.report.models import (
        Files as Files,
        Interruption as Interruption,
        KitCheck as KitCheck,
        StepName as StepName,
        StepOutcome as StepOutcome,
        VerifyRun as VerifyRun,
    )
    from servekit.report.site import build_site as build_site

__getattr__, __dir__ = lazy_face(__name__)
