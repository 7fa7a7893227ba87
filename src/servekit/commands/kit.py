"""``servekit kit build | verify | rebuild | inspect``: image-layer kits.

Each command is generated from its options model (:mod:`servekit.kit.options`)
and calls one function of :mod:`servekit.kit`, imported when it runs. Exit
codes: 0 all checks pass, 1 a check failed, 2 bad input (UsageError). Every
command runs so that SIGTERM/SIGHUP unwind it: its scratch folders always go.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer

from servekit.cliopts import add_command
from servekit.kit import KitBuildOptions, KitInspectOptions, KitRebuildOptions, KitVerifyOptions

T = TypeVar("T")


def _cleanly(command: Callable[[T], int]) -> Callable[[T], int]:
    """Run a command so that SIGTERM/SIGHUP unwind it: its scratch folders always go."""

    def run(opts: T) -> int:
        from servekit.kit import terminate_cleanly

        with terminate_cleanly():
            return command(opts)

    return run


def build(opts: KitBuildOptions) -> int:
    """Build a deterministic kit from a source image or a payload spec."""
    from servekit.kit import build_kit

    result = build_kit(opts)
    m = result.manifest
    typer.echo(
        f"{result.archive}: {len(m.layers)} working layer(s), {m.image.payload_count} payload"
        f" file(s), {m.image.fs_entries} entries; sha256 {result.sha256}"
    )
    return 0


def _family_table(opts: KitVerifyOptions) -> Callable[[str], dict[str, str]] | None:
    """``--family``: the catalog family's row per role (the kit package never reads the catalog)."""
    if opts.family is None:
        return None
    from servekit.catalog import family_script_defaults
    from servekit.vocabulary import ROLES

    # Read the catalog once, before the kit (a bad family fails first), not per script.
    rows: dict[str, dict[str, str]] = {
        role: family_script_defaults(opts.family, role, opts.catalog, opts.kind) for role in ROLES
    }
    return rows.__getitem__


def verify(opts: KitVerifyOptions) -> int:
    """Check a kit without running anything from it; 1 on any failure."""
    from rich.console import Console

    from servekit.kit import NONCE_FILE, checks_table, verify_kit, verify_release

    table = _family_table(opts)
    written = ""
    if opts.out is not None:
        release, report = verify_release(opts, table)
        written = f"release table: {opts.out / 'kit-table.md'} ({len(release.rows)} rows)"
        if opts.smoke is None:
            written += (
                f"\nsmoke nonce: {opts.out / NONCE_FILE} (run 'sh selftest.sh image NONCE'"
                " in the rebuilt image, then give --smoke LOG --nonce that file)"
            )
    else:
        report = verify_kit(opts, table)
    if opts.as_json:
        typer.echo(report.model_dump_json(indent=2))
    else:
        Console().print(checks_table(report, "kit verify"))
        if written:
            typer.echo(written)
    return 0 if report.ok else 1


def rebuild(opts: KitRebuildOptions) -> int:
    """Apply the kit onto its base and prove the result equals the source."""
    from rich.console import Console

    from servekit.kit import checks_table, rebuild_kit

    report = rebuild_kit(opts)
    Console().print(checks_table(report, "kit rebuild"))
    return 0 if report.ok else 1


def inspect(opts: KitInspectOptions) -> int:
    """Show a kit's layers, payload, config delta and stamps, or an image's layers."""
    from rich.console import Console

    from servekit.errors import UsageError
    from servekit.kit import (
        inspect_image,
        inspect_kit,
        is_kit,
        is_rootfs,
        print_image,
        print_kit,
        rootfs_manifest,
    )

    console = Console()
    if is_rootfs(opts.target):
        if not opts.fs:
            raise UsageError(
                f"{opts.target} is a plain folder: add --fs to print its filesystem manifest"
            )
        typer.echo("\n".join(rootfs_manifest(Path(opts.target), list(opts.exclude))))
        return 0
    if is_kit(opts.target):
        manifest = inspect_kit(Path(opts.target))
        if opts.as_json:
            typer.echo(manifest.model_dump_json(indent=2))
        else:
            print_kit(console, manifest)
        return 0
    summary = inspect_image(opts.target, with_fs=opts.fs)
    if opts.as_json:
        typer.echo(summary.model_dump_json(indent=2))
    elif opts.fs:
        typer.echo("\n".join(summary.fs_manifest or []))
    else:
        print_image(console, summary)
    return 0


def register(app: typer.Typer) -> None:
    """Attach the ``kit`` sub-app to the root app."""
    kit = typer.Typer(help="Image-layer kits: base image + working layers, rebuilt and proven.")
    add_command(
        kit,
        "build",
        KitBuildOptions,
        _cleanly(build),
        doc="Build a deterministic kit from a source image or a payload spec.",
    )
    add_command(
        kit,
        "verify",
        KitVerifyOptions,
        _cleanly(verify),
        doc="Check a kit without running anything from it; exit 1 on any failure.",
        arguments=("archive",),
    )
    add_command(
        kit,
        "rebuild",
        KitRebuildOptions,
        _cleanly(rebuild),
        doc="Apply the kit onto its base and prove the result equals the source.",
        arguments=("kit",),
    )
    add_command(
        kit,
        "inspect",
        KitInspectOptions,
        _cleanly(inspect),
        doc="Show a kit's layers, payload, config delta and stamps, or an image's layers "
        "(--fs: an image's or an unpacked rootfs folder's filesystem manifest).",
        arguments=("target",),
    )
    app.add_typer(kit, name="kit")
