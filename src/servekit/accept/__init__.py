"""servekit.accept: the acceptance matrix as a command and a Python API.

``servekit verify`` calls :func:`run_accept` with its :class:`AcceptOptions`, reads and
writes :class:`AcceptResult` files, and puts :func:`render_markdown`'s section
into the release report.
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.accept.checks.common import metric_labelled as metric_labelled
    from servekit.accept.checks.invariants import SOURCES as SOURCES
    from servekit.accept.command import main as main
    from servekit.accept.markdown import (
        render_markdown as render_markdown,
        summary_line as summary_line,
    )
    from servekit.accept.models import (
        AcceptResult as AcceptResult,
        CheckResult as CheckResult,
        EvidenceFile as EvidenceFile,
        read_result as read_result,
        write_result as write_result,
    )
    from servekit.accept.options import AcceptOptions as AcceptOptions
    from servekit.accept.progress import check_weight as check_weight, weights_for as weights_for
    from servekit.accept.runner import (
        RESULT_FILE as RESULT_FILE,
        run_accept as run_accept,
        run_acceptance_async as run_acceptance_async,
    )

__getattr__, __dir__ = lazy_face(__name__)
