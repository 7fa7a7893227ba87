"""``servekit advise`` and ``servekit advise calibrate``: registration only.

Both are generated from their options models (:mod:`servekit.advise.options`);
the work is :func:`servekit.advise.run_advise` and
:func:`servekit.advise.run_calibrate`, imported when the command runs. See
docs/advise.md.
"""

from __future__ import annotations

import typer

from servekit.advise import AdviseCalibrateOptions, AdviseOptions
from servekit.cliopts import add_command, callback_from_model


def _advise(opts: AdviseOptions) -> int:
    from rich.console import Console

    from servekit.advise import (
        print_advice,
        run_advise,
        run_validation,
        validation_rows,
        write_best,
        write_json,
    )
    from servekit.termtable import fit_tables

    console = Console()
    advice = run_advise(opts)
    print_advice(advice, opts.top, console)
    if opts.json_out is not None:
        console.print(f"wrote {write_json(advice, opts.json_out)}")
    if opts.write:
        console.print(write_best(advice, opts))
    if opts.validate_top:
        vals = run_validation(
            advice, opts.validate_top, opts.validate_engine, opts.validate_speed, opts.catalog
        )
        header, rows = validation_rows(vals, advice.slo)
        for table in fit_tables(console, header, rows, title="predicted against measured"):
            console.print(table)
    return 0


def _calibrate(opts: AdviseCalibrateOptions) -> int:
    from servekit.advise import run_calibrate

    cal = run_calibrate(opts)
    for fit in cal.engines:
        typer.echo(
            f"{fit.name} ({fit.engine}) for {', '.join(fit.shapes)}: prefill "
            f"{fit.prefill.overhead_s * 1000:.2f} ms/step + {fit.prefill.per_token_s * 1e6:.2f} "
            f"us/token (rms {fit.prefill.rms_error_pct:.1f}%, chunk {fit.prefill.chunk_tokens}); "
            f"decode {fit.decode.step_s(1) * 1000:.2f} ms at batch 1, "
            f"{fit.decode.step_s(fit.decode.max_batch_measured) * 1000:.2f} ms at "
            f"{fit.decode.max_batch_measured} (rms {fit.decode.rms_error_pct:.1f}%), A "
            f"{fit.decode.acceptance_length:.2f}, runs {fit.decode.max_running} at once; "
            f"KV {fit.kv_capacity_tokens:,} tokens"
        )
    t = cal.transfer
    typer.echo(
        f"KV hand-off: {t.overhead_s * 1000:.2f} ms + {t.per_token_s * 1e6:.3f} us/token"
        if t.observations
        else "KV hand-off: not measured (calibrate a PD pair with --pair)"
    )
    typer.echo(f"wrote {opts.out / 'calibration.json'}")
    return 0


def register(app: typer.Typer) -> None:
    """Attach ``advise`` (and ``advise calibrate``) to the root app."""
    group = typer.Typer(invoke_without_command=True, no_args_is_help=False)
    group.callback()(callback_from_model(AdviseOptions, _advise, doc=AdviseOptions.__doc__ or ""))
    add_command(
        group,
        "calibrate",
        AdviseCalibrateOptions,
        _calibrate,
        doc="Fit one engine (or a PD pair's KV hand-off) from servekit bench measurements.",
    )
    app.add_typer(
        group,
        name="advise",
        help="Which layout for this workload and SLO, predicted from measurements.",
    )
