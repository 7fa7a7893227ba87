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
from servekit.catalog import LAYOUT_NAME, LayoutsImportOptions, load, resolve_catalog
from servekit.errors import UsageError
from servekit.importer.extract import SourceRef, extract_folder
from servekit.importer.synthesize import Synthesis, synthesize
from servekit.importer.write import profile_file, write_layout

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
    if not re.fullmatch(LAYOUT_NAME, name) or name.count("/") != 2:
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
        raise UsageError(f"{path}:{exc.lineno}: not JSON ({exc.msg}); give a source.json") from exc
    if not isinstance(data, dict) or not isinstance(data.get("processes"), list):
        raise UsageError(f"{path}:1: no 'processes' list; give the facts an import recorded")
    return data


def run_folder(folder: Path, repo: str, commit: str | None) -> dict[str, Any]:
    """The facts of ``folder``, taken by the contained runner (one line and exit 2 on a breach)."""
    resolved = folder.resolve()
    ref = SourceRef(
        repo=repo, commit=commit, folder=f"models/{resolved.parent.name}/{resolved.name}"
    )
    return extract_folder(folder, source=ref).document()


def _staged_check(catalog: Path, synth: Synthesis, doc: dict[str, Any]) -> None:
    """Write into a scratch copy first: a layout that would not load is never written."""
    name = str(synth.layout["name"])
    with tempfile.TemporaryDirectory(prefix="servekit-import-") as tmp:
        scratch = Path(tmp)
        profile, copy = profile_file(catalog, name), profile_file(scratch, name)
        if profile.is_file():
            copy.parent.mkdir(parents=True)
            shutil.copy2(profile, copy)
        write_layout(scratch, synth, doc)
        load(name, scratch)


def import_layout(opts: LayoutsImportOptions) -> tuple[str, list[Path], list[str]]:
    """(layout name, files changed, lines not expressed) of one import.

    ``opts`` is ``servekit layouts import``'s own model.
    """
    folder, facts = opts.folder, opts.facts
    root = resolve_catalog(opts.catalog)
    chosen = _check_name(opts.name or name_for(folder))
    doc = read_facts(facts) if facts is not None else run_folder(folder, opts.repo, opts.commit)
    try:
        synth = synthesize(doc, chosen)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        where = facts if facts is not None else folder
        raise UsageError(
            f"{where}: the facts are not in the recorded format ({type(exc).__name__}: "
            f"{str(exc)[:80]}); give a source.json an import wrote"
        ) from exc
    _staged_check(root, synth, doc)
    changed = write_layout(root, synth, doc)
    return chosen, changed, [u.text() for u in synth.unexpressed]
