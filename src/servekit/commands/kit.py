"""``servekit kit build | verify | rebuild | inspect``: image-layer kits.

Parses options, calls one function of :mod:`servekit.kit`, prints. Exit codes:
0 all checks pass, 1 a check failed, 2 bad input (UsageError).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar

import typer

P = ParamSpec("P")
R = TypeVar("R")

MaxSize = Annotated[
    int, typer.Option("--max-size", help="Largest size (bytes) a stream may decompress to")
]
MaxRatio = Annotated[int, typer.Option("--max-ratio", help="Largest decompression ratio")]
DEFAULT_MAX_SIZE = 64 << 30
DEFAULT_MAX_RATIO = 1000


def register(app: typer.Typer) -> None:
    """Attach the ``kit`` sub-app to the root app."""
    kit = typer.Typer(help="Image-layer kits: base image + working layers, rebuilt and proven.")
    kit.command("build")(_cleanly(build))
    kit.command("verify")(_cleanly(verify))
    kit.command("rebuild")(_cleanly(rebuild))
    kit.command("inspect")(_cleanly(inspect))
    app.add_typer(kit, name="kit")


def _cleanly(command: Callable[P, R]) -> Callable[P, R]:
    """Run a command so that SIGTERM/SIGHUP unwind it: its scratch folders always go."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        from servekit.kit.scratch import terminate_cleanly

        with terminate_cleanly():
            return command(*args, **kwargs)

    return run


def build(
    *,
    base: Annotated[str, typer.Option(help="Base image: OCI dir or docker-archive .tar")],
    out: Annotated[Path, typer.Option(help="Kit file to write (NAME.tar.zst)")],
    source: Annotated[str | None, typer.Option(help="Source image built on the base")] = None,
    payload: Annotated[Path | None, typer.Option(help="Payload spec (YAML/JSON)")] = None,
    payload_root: Annotated[
        Path | None, typer.Option(help="Project root for payload sources (default: spec's folder)")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Kit folder name (default: from --out)")] = None,
    base_ref: Annotated[
        str | None, typer.Option(help="Reference to record for the base, e.g. repo/img:tag")
    ] = None,
    repo: Annotated[Path | None, typer.Option(help="Git repo for the repo_rev stamp")] = None,
    engine: Annotated[
        list[str] | None, typer.Option(help="Engine version NAME=VERSION (repeatable)")
    ] = None,
    date: Annotated[
        str | None, typer.Option(help="'created' stamp (default: repo HEAD date)")
    ] = None,
    expect: Annotated[
        Path | None,
        typer.Option(help="YAML of the kit's promises (the expect: section), for --source"),
    ] = None,
    max_size: MaxSize = DEFAULT_MAX_SIZE,
    max_ratio: MaxRatio = DEFAULT_MAX_RATIO,
) -> None:
    """Build a deterministic kit from a source image or a payload spec."""
    from servekit.kit.build import BuildRequest, build_kit
    from servekit.kit.streams import Limits

    req = BuildRequest(
        base=base,
        out=out,
        base_ref=base_ref,
        source=source,
        payload=payload,
        payload_root=payload_root,
        name=name,
        repo=repo,
        engines=_pairs(engine or []),
        created=date,
        limits=Limits(max_total=max_size, max_ratio=max_ratio),
        expect=expect,
    )
    result = build_kit(req)
    m = result.manifest
    typer.echo(
        f"{result.archive}: {len(m.layers)} working layer(s), {m.image.payload_count} payload"
        f" file(s), {m.image.fs_entries} entries; sha256 {result.sha256}"
    )


def _pairs(items: list[str]) -> dict[str, str]:
    import re

    from servekit.errors import UsageError

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", key) or not value.isprintable():
            raise UsageError(f"--engine {item!r}: write NAME=VERSION, e.g. vllm=0.27.1")
        out[key] = value
    return out


def _exit(ok: bool) -> None:
    """Exit 0 or 1 through SystemExit, which every CLI entry honours."""
    raise SystemExit(0 if ok else 1)


def verify(
    archive: Annotated[Path, typer.Argument(help="Kit .tar.zst (or unpacked folder)")],
    *,
    repo: Annotated[
        Path | None,
        typer.Option(help="Git checkout: every payload file against it at the stamped repo_rev"),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(help="Release baseline repo_rev (7497a06+0dirty or a commit)"),
    ] = None,
    base: Annotated[
        str | None, typer.Option(help="Base image: rebuild onto it and prove the result")
    ] = None,
    smoke: Annotated[
        Path | None, typer.Option(help="Log of 'selftest.sh image' run in the rebuilt image")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Folder for the release table (Markdown, JSON) and its evidence"),
    ] = None,
    kind: Annotated[
        str | None,
        typer.Option(help="Also compare script defaults with servekit's table for this kind"),
    ] = None,
    role: Annotated[
        str | None,
        typer.Option(help="Role for --kind (default: from each script's name)"),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON")] = False,
    max_size: MaxSize = DEFAULT_MAX_SIZE,
    max_ratio: MaxRatio = DEFAULT_MAX_RATIO,
) -> None:
    """Check a kit without running anything from it; exit 1 on any failure."""
    from rich.console import Console

    from servekit.kit.releasetable import verify_release
    from servekit.kit.streams import Limits
    from servekit.kit.tables import checks_table
    from servekit.kit.verify import VerifyOptions, run_verify

    _check_role(kind, role)
    options = VerifyOptions(
        limits=Limits(max_total=max_size, max_ratio=max_ratio),
        kind=kind,
        role=role,
        repo=repo,
        baseline=baseline,
        base=base,
        smoke=smoke,
    )
    if out is not None:
        table, report = verify_release(archive, out, options)
        written = f"release table: {out / 'kit-table.md'} ({len(table.rows)} rows)"
    else:
        report, written = run_verify(archive, options).report, ""
    if json_out:
        typer.echo(report.model_dump_json(indent=2))
    else:
        Console(width=160).print(checks_table(report, "kit verify"))
        if written:
            typer.echo(written)
    _exit(report.ok)


def _check_role(kind: str | None, role: str | None) -> None:
    from servekit.errors import UsageError

    if role is not None and kind is None:
        raise UsageError("--role applies to the servekit table check: give --kind KIND too")
    if role is not None and role not in ("decode", "prefill", "mixed"):
        raise UsageError(f"--role {role!r}: choose decode, prefill or mixed")
    if kind is not None:
        from servekit.defaults import ENGINE_KINDS

        if kind not in ENGINE_KINDS:
            raise UsageError(f"--kind {kind!r}: choose one of {', '.join(ENGINE_KINDS)}")


def rebuild(
    kit: Annotated[Path, typer.Argument(help="Kit .tar.zst or unpacked folder")],
    base: Annotated[str, typer.Option(help="Base image: OCI dir or docker-archive .tar")],
    *,
    out: Annotated[Path, typer.Option(help="OCI layout dir, or FILE.tar for docker-archive")],
    tag: Annotated[str | None, typer.Option(help="Tag (OCI ref name or repo:tag)")] = None,
    gzip: Annotated[
        bool, typer.Option("--gzip", help="Gzip the working layers (OCI output)")
    ] = False,
    max_size: MaxSize = DEFAULT_MAX_SIZE,
    max_ratio: MaxRatio = DEFAULT_MAX_RATIO,
) -> None:
    """Apply the kit onto its base and prove the result equals the source."""
    from rich.console import Console

    from servekit.kit.rebuild import RebuildRequest, rebuild_kit
    from servekit.kit.streams import Limits

    req = RebuildRequest(kit, base, out, tag, Limits(max_total=max_size, max_ratio=max_ratio), gzip)
    report = rebuild_kit(req)
    from servekit.kit.tables import checks_table

    Console(width=160).print(checks_table(report, "kit rebuild"))
    _exit(report.ok)


def inspect(
    target: Annotated[str, typer.Argument(help="Kit (.tar.zst or folder) or image reference")],
    *,
    fs: Annotated[bool, typer.Option("--fs", help="Print the filesystem manifest instead")] = False,
    exclude: Annotated[
        list[str] | None, typer.Option(help="Rootfs path to skip with --fs, e.g. /proc")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Show a kit's layers, payload, config delta and stamps, or an image's layers.

    ``--fs`` prints an image's or an unpacked rootfs folder's filesystem manifest.
    """
    from rich.console import Console

    from servekit.errors import UsageError
    from servekit.kit.inspector import (
        inspect_image,
        inspect_kit,
        is_kit,
        is_rootfs,
        rootfs_manifest,
    )
    from servekit.kit.tables import print_image, print_kit

    console = Console(width=160)
    if is_rootfs(target):
        if not fs:
            raise UsageError(
                f"{target} is a plain folder: add --fs to print its filesystem manifest"
            )
        typer.echo("\n".join(rootfs_manifest(Path(target), exclude or [])))
        return
    if is_kit(target):
        manifest = inspect_kit(Path(target))
        if json_out:
            typer.echo(manifest.model_dump_json(indent=2))
        else:
            print_kit(console, manifest)
        return
    summary = inspect_image(target, with_fs=fs)
    if json_out:
        typer.echo(summary.model_dump_json(indent=2))
    elif fs:
        typer.echo("\n".join(summary.fs_manifest or []))
    else:
        print_image(console, summary)
