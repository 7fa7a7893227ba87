"""servekit.report: the release report of a verify run folder, and the catalog site.

The report is rebuilt from the files a run left (:func:`build_report`), so it
renders the same whoever ran the run; ``build_site`` writes the catalog as a
static site. Running a verification is :mod:`servekit.verify`'s job.
"""

from servekit.report.build import build_report
from servekit.report.models import VerifyRun
from servekit.report.site import build_site

__all__ = ["VerifyRun", "build_report", "build_site"]
