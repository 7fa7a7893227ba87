"""Where each payload file comes from in the code repository, recorded at build time.

``kit verify --repo`` compares every payload file with the repository at the
stamped commit, so the kit must say which repository file each payload file
is. From a payload spec the answer is the ``src`` of the file (when it lies
inside the repository); from a source image it is found by content: the
repository file at HEAD with the same sha256 (same base name preferred; an
ambiguous match records nothing rather than a guess).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from pathlib import Path

from servekit.kit.gitrepo import blob_sha256, toplevel, tracked_files


def by_path(repo: Path, sources: Mapping[str, Path]) -> dict[str, str]:
    """Payload path -> repository-relative path of its ``src``, for sources in the repo."""
    top = toplevel(repo).resolve()
    out = {}
    for dest, src in sources.items():
        resolved = src.resolve()
        if resolved.is_relative_to(top):
            out[dest] = resolved.relative_to(top).as_posix()
    return out


def by_content(repo: Path, digests: Mapping[str, str]) -> dict[str, str]:
    """Payload path -> the repository file at HEAD with the same content (unambiguous)."""
    top = toplevel(repo)
    found: dict[str, list[str]] = {}
    for path, digest in blob_sha256(top, "HEAD", tracked_files(top, "HEAD")).items():
        if digest is not None:
            found.setdefault(digest, []).append(path)
    out = {}
    for dest, digest in digests.items():
        candidates = found.get(digest, [])
        named = [c for c in candidates if posixpath.basename(c) == posixpath.basename(dest)]
        pick = named if named else candidates
        if len(pick) == 1:
            out[dest] = pick[0]
    return out
