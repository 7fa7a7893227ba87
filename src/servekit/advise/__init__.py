"""servekit.advise: which layout for this workload, predicted from measurements.

Face: :class:`AdviseOptions` and :func:`run_advise` (``servekit advise``: rank a
family's layouts, catalog and derived, for a workload and SLOs),
:class:`AdviseCalibrateOptions` and :func:`run_calibrate` (``servekit advise
calibrate``: fit an engine from ``servekit bench`` measurements), :func:`predict`
(one layout, one workload: the simulator's engines in virtual time on the fit)
and :func:`run_validation` (``--validate``: the top layouts run and measured).
See docs/advise.md.
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.advise.bands import Band as Band, band_for as band_for
    from servekit.advise.calibrate import (
        fit_engine as fit_engine,
        run_calibrate as run_calibrate,
    )
    from servekit.advise.candidates import (
        Candidate as Candidate,
        confirm as confirm,
        find_candidates as find_candidates,
    )
    from servekit.advise.fit import (
        fit_decode as fit_decode,
        fit_prefill as fit_prefill,
        fit_transfer as fit_transfer,
    )
    from servekit.advise.model import (
        Calibration as Calibration,
        DecodeFit as DecodeFit,
        EngineFit as EngineFit,
        PrefillFit as PrefillFit,
        TransferFit as TransferFit,
        read_calibration as read_calibration,
    )
    from servekit.advise.observe import (
        DecodeObs as DecodeObs,
        Observations as Observations,
        PrefillObs as PrefillObs,
        observations_of as observations_of,
        read_bench_dir as read_bench_dir,
    )
    from servekit.advise.options import (
        AdviseCalibrateOptions as AdviseCalibrateOptions,
        AdviseOptions as AdviseOptions,
    )
    from servekit.advise.predict import (
        Prediction as Prediction,
        Slo as Slo,
        predict_layout as predict_layout,
    )
    from servekit.advise.rank import (
        Advice as Advice,
        run_advise as run_advise,
        slo_of as slo_of,
        write_best as write_best,
    )
    from servekit.advise.report import print_advice as print_advice, write_json as write_json
    from servekit.advise.validate import (
        Measured as Measured,
        measure_layout as measure_layout,
        run_validation as run_validation,
        validation_rows as validation_rows,
    )
    from servekit.advise.workload import (
        Drawn as Drawn,
        Workload as Workload,
        drawn_workload as drawn_workload,
        parse_dist as parse_dist,
        trace_workload as trace_workload,
    )

__getattr__, __dir__ = lazy_face(__name__)
