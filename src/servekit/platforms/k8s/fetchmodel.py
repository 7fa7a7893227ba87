"""Download a model into a folder before the engines start (a Kubernetes init container).

Shipped beside the scripts as ``servekit_fetch_model.py`` and run by the engine image's
``python3`` (every vLLM image has ``huggingface_hub``)::

    python3 servekit_fetch_model.py REPO REVISION DEST

The token comes from ``HF_TOKEN`` (a Secret's key, through the pod's env), a mirror
from ``HF_ENDPOINT``. A finished download leaves ``.servekit-model`` holding
``REPO@REVISION``; a pod that finds it (a shared claim another pod filled, or its own
restart) starts at once, and a different repository or revision downloads again.
Standard library but for ``huggingface_hub``, imported only when there is work to do.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

MARKER = ".servekit-model"
FILE = "servekit_fetch_model.py"


def fetch(repo: str, revision: str, dest: Path) -> bool:
    """Download ``repo`` at ``revision`` into ``dest``; False when it was already there."""
    want = f"{repo}@{revision}\n"
    marker = dest / MARKER
    try:
        if marker.read_text(encoding="utf-8") == want:
            return False
    except OSError:
        pass
    hub = importlib.import_module("huggingface_hub")
    hub.snapshot_download(
        repo_id=repo,
        revision=revision or None,
        local_dir=str(dest),
        token=os.environ.get("HF_TOKEN") or None,
    )
    tmp = dest / (MARKER + ".tmp")
    tmp.write_text(want, encoding="utf-8")
    os.replace(tmp, marker)
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: servekit_fetch_model.py REPO REVISION DEST", file=sys.stderr)
        return 2
    repo, revision, dest = argv[1], argv[2], Path(argv[3])
    try:
        dest.mkdir(parents=True, exist_ok=True)
        done = fetch(repo, revision, dest)
    except Exception as exc:
        print(f"[servekit] downloading {repo}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(
        f"[servekit] {repo}@{revision or 'main'} {'downloaded to' if done else 'already in'} {dest}"
    )
    return 0


def source_bytes() -> bytes:
    """This module's source, shipped beside the scripts."""
    return Path(__file__).read_bytes()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
