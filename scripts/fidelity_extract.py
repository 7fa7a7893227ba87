#!/usr/bin/env python3
"""Refresh the fidelity fixtures: run every node of each source layout on the fake platform.

    scripts/fidelity_extract.py SOURCE_DIR OUT_DIR --commit SHA

SOURCE_DIR holds one folder per layout (``1node/run.sh``, ``1p1d/run.sh``, ...), as
``git archive COMMIT models/deepseekv4-flash-a3`` of the source repository gives
them; OUT_DIR receives ``<layout>.json`` per layout (tests/render/fidelity/a3).
Each layout runs through servekit.importer.extract_folder: every node rank on the
fake platform (fake rank table, fake hostname/ifconfig, recording vllm and proxy),
each in its bubblewrap sandbox; nothing of the source runs any other way. See
tests/render/fidelity/README.md (scripts/import_source.py does the same for every
folder of a checkout: docs/importer.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from servekit.errors import UsageError
from servekit.fsutil import atomic_write_text
from servekit.importer import SourceRef, extract_folder
from servekit.importer.platform import fixture

# Node count of each layout of models/deepseekv4-flash-a3 (its run.sh checks it).
LAYOUT_NODES = {
    "1node": 1,
    "2nodes": 2,
    "1p1d": 2,
    "2p1x2d": 4,
    "2p2d": 4,
    "3p1d": 4,
    "1p3d": 4,
}


def _layout_arg(text: str) -> tuple[str, int]:
    name, sep, count = text.partition("=")
    if not sep or not count.isdigit() or not name:
        raise argparse.ArgumentTypeError(f"want NAME=NODES, got {text!r}")
    return name, int(count)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source_dir", type=Path, help="folder with one folder per layout")
    parser.add_argument("out_dir", type=Path, help="where <layout>.json are written")
    parser.add_argument("--commit", required=True, help="source commit the folder came from")
    parser.add_argument("--repo", default="xuopoj/ma-vllm-samples", help="source repository")
    parser.add_argument("--folder", default="models/deepseekv4-flash-a3", help="folder in it")
    parser.add_argument(
        "--layout",
        type=_layout_arg,
        action="append",
        metavar="NAME=NODES",
        help="only these layouts (default: the seven A3 layouts)",
    )
    parser.add_argument("--shell", default="dash", help="shell that runs run.sh (default dash)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    layouts = dict(args.layout) if args.layout else LAYOUT_NODES
    missing = [n for n in layouts if not (args.source_dir / n / "run.sh").is_file()]
    if missing:
        print(f"error: no run.sh for {', '.join(missing)} under {args.source_dir}", file=sys.stderr)
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, nodes in layouts.items():
        ref = SourceRef(
            repo=args.repo, commit=args.commit, folder=f"{args.folder.rstrip('/')}/{name}"
        )
        try:
            facts = extract_folder(
                args.source_dir / name, nodes=nodes, source=ref, shell=args.shell
            )
        except UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        doc = facts.document()
        atomic_write_text(args.out_dir / f"{name}.json", fixture.dumps(doc))
        print(f"{name}: {len(doc['processes'])} processes on {doc['nodes']} nodes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
