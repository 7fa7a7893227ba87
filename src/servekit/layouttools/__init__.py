"""servekit.layouttools: layout tools that are not import: derive, compare, drift.

Face: :func:`derive_layout` and :func:`write_derived` (``servekit layouts new``: a
layout computed from a base by the source's own new-deployment rules),
:func:`diff_sources` and :func:`print_diff` (``layouts diff``: two Plans, never
files), :func:`drift_report` and :func:`print_drift` (``layouts drift``: a layout's
role commands against a newer tutorial). They need render's rules and Plan and the
importer's writer and facts, so they sit above both.
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.layouttools.compare import (
        diff_sources as diff_sources,
        print_diff as print_diff,
    )
    from servekit.layouttools.derive import (
        derive_layout as derive_layout,
        write_derived as write_derived,
    )
    from servekit.layouttools.drift import drift_report as drift_report, print_drift as print_drift

__getattr__, __dir__ = lazy_face(__name__)
