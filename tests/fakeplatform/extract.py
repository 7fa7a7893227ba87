"""Take a source layout's facts by running every node of it on the fake platform.

``extract_layout`` copies one layout folder of the source (the files the platform
puts in ``/root/script``) to a temp folder, builds a fake platform of the
layout's node count with one group-0 node, runs ``dash run.sh`` on every node
rank and returns the fixture document of everything they started. Nothing of the
source runs except under the fake platform, and always as a list argv.

The source's own side effect is kept: its role scripts run ``mkdir -p
/root/kernel_cache && cd /root/kernel_cache``. ``extract_layouts`` removes that
folder afterwards only if it did not exist before and is still empty.
"""

from __future__ import annotations

import shutil
import stat
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fakeplatform import fixture
from tests.fakeplatform.harness import (
    NodeRun,
    create_platform,
    default_groups,
    run_all_nodes,
    run_facts,
)

KERNEL_CACHE = Path("/root/kernel_cache")
EXECUTABLE_ASSUMPTION = (
    "*.sh made executable: role scripts are started with exec, and the platform's copy "
    "of the scripts folder is assumed to keep them executable"
)


class ExtractError(RuntimeError):
    """A node of a source layout did not run to the end on the fake platform."""


@dataclass(frozen=True)
class Source:
    """Where the layouts come from (written into every fixture)."""

    repo: str
    commit: str
    folder: str


def _make_scripts_executable(folder: Path) -> None:
    for path in folder.rglob("*.sh"):
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _check(name: str, runs: list[NodeRun]) -> None:
    for run in runs:
        if run.timed_out or run.returncode != 0 or not run.records:
            tail = "\n".join(run.stderr.splitlines()[-15:])
            raise ExtractError(
                f"{name}: node {run.node} ended with {run.returncode} "
                f"(timed out: {run.timed_out}, {len(run.records)} processes recorded)\n{tail}"
            )


def extract_layout(
    layout_dir: Path,
    nodes: int,
    source: Source,
    *,
    shell: str = "dash",
    entry: str = "run.sh",
    timeout: float = 120.0,
) -> dict[str, Any]:
    """The fixture document of one source layout folder run on ``nodes`` fake nodes."""
    with tempfile.TemporaryDirectory(prefix="fidelity-") as tmp:
        scripts = Path(tmp) / "script"
        shutil.copytree(layout_dir, scripts, symlinks=True)
        _make_scripts_executable(scripts)
        platform = create_platform(Path(tmp) / "platform", nodes, default_groups(nodes))
        runs = run_all_nodes(platform, scripts / entry, shell=shell, timeout=timeout)
        _check(layout_dir.name, runs)
        processes = [facts for run in runs for facts in run_facts(platform, run)]
    meta = {
        "source": {
            "repo": source.repo,
            "commit": source.commit,
            "folder": f"{source.folder.rstrip('/')}/{layout_dir.name}",
        },
        "entry": entry,
        "shell": shell,
        "nodes": nodes,
        "group0_size": platform.group_sizes[0],
        "assumptions": [EXECUTABLE_ASSUMPTION],
    }
    return fixture.document(meta, processes)


def extract_layouts(
    source_dir: Path,
    layouts: Mapping[str, int],
    source: Source,
    *,
    shell: str = "dash",
) -> Iterable[tuple[str, dict[str, Any]]]:
    """``(name, document)`` for each layout folder of ``source_dir`` named in ``layouts``."""
    created_cache = not _exists(KERNEL_CACHE)
    try:
        for name, nodes in layouts.items():
            yield name, extract_layout(source_dir / name, nodes, source, shell=shell)
    finally:
        if created_cache:
            _remove_if_empty(KERNEL_CACHE)


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:
        return False


def _remove_if_empty(path: Path) -> None:
    try:
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    except OSError:
        pass
