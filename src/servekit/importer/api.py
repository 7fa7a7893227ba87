"""``servekit layouts import``: a source folder (or its recorded facts) into a catalog.

Running the folder is the contained runner's job (``servekit.importer.extract``:
every node rank on the fake platform, in its sandbox); this module names the
layout, synthesizes it, checks that it loads and writes it with its profile and
facts. Each thing the layout cannot express is one printed line naming its file
and line.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from servekit import safeyaml
from servekit.catalog import (
    LAYOUT_FILE,
    Layout,
    LayoutName,
    LayoutsImportOptions,
    layout_names,
    load,
    resolve_catalog,
)
from servekit.errors import UsageError
from servekit.importer.extract import SourceRef, extract_folder
from servekit.importer.synthesize import Synthesis, synthesize
from servekit.importer.write import profile_file, write_layout
from servekit.render import build_plan, check_layout, source_caveat

_MODEL_DIR = re.compile(r"^(?P<model>[a-z0-9][a-z0-9.-]*)-(?P<hw>a2|a3)$")


def name_for(folder: Path) -> str:
    """``.../models/glm5.1-a3/1x2p1x4d`` -> ``a3/glm5.1/1x2p1x4d`` (the naming rule)."""
    m = _MODEL_DIR.match(folder.resolve().parent.name)
    topology = folder.resolve().name
    if m is None:
        raise UsageError(
            f"{folder}: its parent folder is not <model>-a2 or <model>-a3; give --name "
            "<hw>/<model>/<topology>"
        )
    return f"{m['hw']}/{m['model']}/{topology}"


def _check_name(name: str) -> str:
    try:
        three_part = LayoutName.parse(name).has_model
    except ValueError:
        three_part = False
    if not three_part:
        raise UsageError(
            f"--name {name[:60]!r}: give <hw>/<model>/<topology>, e.g. a3/glm5.1/1x2p1x4d"
        )
    return name


def read_facts(path: Path) -> dict[str, Any]:
    """A recorded facts document (bounded like every file servekit reads)."""
    text = safeyaml.decode(safeyaml.read_bytes(path), str(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{path}:{exc.lineno}: not JSON ({exc.msg}); give --facts a source.json"
        ) from exc
    if not isinstance(data, dict) or not isinstance(data.get("processes"), list):
        raise UsageError(f"{path}:1: no 'processes' list; give --facts the facts an import wrote")
    return data


def source_folder(folder: Path) -> str:
    """The folder's path in its source: ``models/<model>-<hw>/<topology>`` in the source's
    convention, else the folder's own name (servekit never invents a path)."""
    resolved = folder.resolve()
    if _MODEL_DIR.match(resolved.parent.name) and resolved.parent.parent.name == "models":
        return f"models/{resolved.parent.name}/{resolved.name}"
    return resolved.name


def run_folder(
    folder: Path,
    repo: str | None,
    commit: str | None,
    *,
    nodes: int | None = None,
    entry: str = "run.sh",
) -> dict[str, Any]:
    """The facts of ``folder``, taken by the contained runner (one line and exit 2 on a breach)."""
    ref = SourceRef(repo=repo, commit=commit, folder=source_folder(folder))
    return extract_folder(folder, source=ref, nodes=nodes, entry=entry).document()


def _load_staged(name: str, scratch: Path, where: Path) -> Layout:
    """The layout written into the scratch catalog; a refusal names the folder imported
    and the file as it would be in the catalog, never the scratch copy (gone by then)."""
    try:
        return load(name, scratch).layout
    except UsageError as exc:
        said = str(exc).replace(f"{scratch}/", "")
        raise UsageError(
            f"{where}: the imported layout would not load ({said}); servekit cannot hold the "
            "folder as it is"
        ) from None


def _staged_check(catalog: Path, synth: Synthesis, doc: dict[str, Any], where: Path) -> Layout:
    """Write into a scratch copy first: a layout that would not load, or that render
    would refuse, is never written.

    A render rule the source's own values break (``source_value``) is the source as it
    is: the import records it as a caveat of the layout (``synth.caveats``), which
    render then shows as a warning; any other error refuses the import.
    """
    name = str(synth.layout["name"])
    with tempfile.TemporaryDirectory(prefix="servekit-import-") as tmp:
        scratch = Path(tmp)
        profile, copy = profile_file(catalog, name), profile_file(scratch, name)
        if profile.is_file():
            copy.parent.mkdir(parents=True)
            shutil.copy2(profile, copy)
        write_layout(scratch, synth, doc)
        errors = [f for f in check_layout(_load_staged(name, scratch, where)) if f.level == "error"]
        kept = [source_caveat(f.field, f.message) for f in errors if f.source_value]
        if kept:
            synth.caveats.extend(c for c in kept if c not in synth.caveats)
            write_layout(scratch, synth, doc)
            errors = [
                f for f in check_layout(_load_staged(name, scratch, where)) if f.level == "error"
            ]
        if errors:
            raise UsageError(
                f"{where}: the imported layout breaks a rule render enforces ({errors[0].text()}); "
                "it cannot be rendered as the folder is"
            )
        return _load_staged(name, scratch, where)


def plan_signature(layout: Layout) -> list[tuple[Any, ...]]:
    """What makes two layouts one: every process's name, argv (as a set of words: flag
    order aside), environment, working directory, devices and ports; not the names."""
    return [
        (p.name, sorted(p.argv), sorted(p.env.items()), p.cwd, p.devices, p.api_port, p.kv_port)
        for p in build_plan(layout).processes
    ]


def twin_of(catalog: Path, layout: Layout) -> str | None:
    """The layout of ``catalog`` (another name) whose Plan is ``layout``'s, if any."""
    mine = None
    for name in layout_names(catalog):
        if name == layout.name:
            continue
        other = load(name, catalog).layout
        if (other.nodes, other.hardware) != (layout.nodes, layout.hardware):
            continue
        mine = mine if mine is not None else plan_signature(layout)
        if plan_signature(other) == mine:
            return name
    return None


def import_layout(opts: LayoutsImportOptions) -> tuple[str, list[Path], list[str]]:
    """(layout name, files changed, lines not expressed) of one import.

    ``opts`` is ``servekit layouts import``'s own model.
    """
    folder, facts = opts.folder, opts.facts
    root = resolve_catalog(opts.catalog)
    chosen = _check_name(opts.name or name_for(folder))
    doc = (
        read_facts(facts)
        if facts is not None
        else run_folder(folder, opts.repo, opts.commit, nodes=opts.nodes, entry=opts.entry)
    )
    where = facts if facts is not None else folder
    kinds = sorted({str(p.get("kind")) for p in doc["processes"] if isinstance(p, dict)})
    if "engine" not in kinds:
        raise UsageError(
            f"{where}: the facts hold no vllm process (only: {', '.join(kinds) or 'nothing'}); "
            "a layout needs an engine: import the folder itself to see why none started"
        )
    try:
        synth = synthesize(doc, chosen)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise UsageError(
            f"{where}: the facts are not in the recorded format ({type(exc).__name__}: "
            f"{str(exc)[:80]}); give --facts a source.json an import wrote"
        ) from exc
    staged = _staged_check(root, synth, doc, where)
    if not (root / chosen / LAYOUT_FILE).is_file() and (twin := twin_of(root, staged)):
        raise UsageError(
            f"{where}: already in the catalog as {twin} (the same Plan: every process's "
            f"command, environment, devices and ports); nothing written (--name {twin} "
            "updates it)"
        )
    changed = write_layout(root, synth, doc)
    return chosen, changed, [u.text() for u in synth.unexpressed]
