"""servekit.accept: the acceptance matrix as a command and a Python API.

``servekit verify`` calls :func:`run_accept` with its :class:`AcceptOptions`, reads and
writes :class:`AcceptResult` files, and puts :func:`render_markdown`'s section
into the release report.
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.accept.checks.common import metric_labelled
    from servekit.accept.checks.invariants import SOURCES
    from servekit.accept.markdown import render_markdown, summary_line
    from servekit.accept.models import (
        AcceptResult,
        CheckResult,
        EvidenceFile,
        read_result,
        write_result,
    )
    from servekit.accept.options import AcceptOptions
    from servekit.accept.progress import check_weight, weights_for
    from servekit.accept.runner import RESULT_FILE, main, run_accept, run_acceptance_async

__getattr__, __dir__ = lazy_face(__name__)
__all__ = [
    "RESULT_FILE",
    "SOURCES",
    "AcceptOptions",
    "AcceptResult",
    "CheckResult",
    "EvidenceFile",
    "check_weight",
    "main",
    "metric_labelled",
    "read_result",
    "render_markdown",
    "run_accept",
    "run_acceptance_async",
    "summary_line",
    "weights_for",
    "write_result",
]
