#!/usr/bin/env python3
"""Take the facts of every layout folder of a source checkout, each run contained.

    scripts/import_source.py CHECKOUT [--out tests/importer/source-facts] [--commit SHA]

CHECKOUT is a checkout (or ``git archive`` extraction) of xuopoj/ma-vllm-samples;
every ``models/<model>-<hw>/<topology>/run.sh`` folder is run by
``servekit.importer.extract_folder`` (every node rank on the fake platform, in its
bubblewrap sandbox) and its facts written to ``OUT/<hw>/<model>/<topology>.json``
(``<hw>`` is the model folder's ``-a2``/``-a3`` suffix). One line per folder:
processes, flags, env entries, host tuning writes, unexpressed items; a folder
that cannot be run is one line too, and the exit status is 1. See
docs/importer.md.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

from servekit.errors import UsageError
from servekit.importer import FolderFacts, SourceRef, extract_folder
from servekit.importer.platform import fixture
from servekit.vocabulary import atomic_write_text

MODEL_DIR = re.compile(r"(?P<model>.+)-(?P<hw>a2|a3)")
REPO = "xuopoj/ma-vllm-samples"


def layout_name(model_dir: str, topology: str) -> str | None:
    """``deepseekv4-flash-a3``, ``1p1d`` -> ``a3/deepseekv4-flash/1p1d``."""
    match = MODEL_DIR.fullmatch(model_dir)
    if match is None:
        return None
    return f"{match.group('hw')}/{match.group('model')}/{topology}"


def source_folders(checkout: Path) -> list[tuple[str, Path]]:
    """(layout name, folder) of every layout folder under ``checkout/models``."""
    found = []
    for entry in sorted((checkout / "models").glob("*/*/run.sh")):
        folder = entry.parent
        name = layout_name(folder.parent.name, folder.name)
        if name is not None:
            found.append((name, folder))
    return found


def _commit(checkout: Path) -> str | None:
    done = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def summary(name: str, facts: FolderFacts) -> str:
    processes = facts.process_facts()
    flags = sum(len(p.flags) for p in processes)
    env = sum(len(p.env) for p in processes)
    kinds = {k: sum(p.kind == k for p in processes) for k in ("engine", "proxy")}
    return (
        f"{name}: {facts.nodes} nodes ({facts.nodes_from}), {len(processes)} processes "
        f"({kinds['engine']} engine, {kinds['proxy']} proxy), {flags} flags, {env} env, "
        f"{len(facts.host_tuning)} host tuning writes, {len(facts.unexpressed)} unexpressed"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a checkout of the source repository")
    parser.add_argument("--out", type=Path, default=Path("tests/importer/source-facts"))
    parser.add_argument("--commit", help="the checkout's commit (default: git rev-parse HEAD)")
    parser.add_argument("--repo", default=REPO)
    parser.add_argument("--only", action="append", help="only these layout names")
    args = parser.parse_args(argv)
    commit = args.commit or _commit(args.checkout)
    if commit is None:
        print("error: cannot tell the checkout's commit; pass --commit SHA", file=sys.stderr)
        return 2
    folders = source_folders(args.checkout)
    if not folders:
        print(f"error: no models/*/*/run.sh under {args.checkout}", file=sys.stderr)
        return 2
    failed = 0
    for name, folder in folders:
        if args.only and name not in args.only:
            continue
        ref = SourceRef(
            repo=args.repo, commit=commit, folder=f"models/{folder.parent.name}/{folder.name}"
        )
        started = time.monotonic()
        try:
            facts = extract_folder(folder, source=ref)
        except UsageError as exc:
            print(f"{name}: could not be run: {exc}")
            failed += 1
            continue
        target = args.out / f"{name}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(target, fixture.dumps(facts.document()))
        print(f"{summary(name, facts)} [{time.monotonic() - started:.1f}s]")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
