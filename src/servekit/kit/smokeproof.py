"""The smoke proof: a nonce only this verify run knows, bound to the rebuilt image's files.

A smoke log that merely names the kit's image id proves it came from this
kit's ``selftest.sh``, not that it ran inside the rebuilt image: the id is baked
into the script. So ``kit verify --out DIR`` issues a fresh nonce
(:func:`issue_nonce`, kept in ``DIR/smoke-nonce.txt``), the user runs
``sh selftest.sh image NONCE`` inside the rebuilt image, and the script prints
``selftest proof NONCE sha256:HEX``: the sha256 of the text ``nonce NONCE`` then
one line per witness file (every payload file at its image path, then
``/etc/os-release`` of the base), each the file's sha256 or ``absent``.
:func:`expected_proof` recomputes that text from the rebuilt image's own layer
contents (never from the log), so an old log (another nonce), a run outside the
image (other files) and a hand-written log all miss.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import secrets
from pathlib import Path

from servekit.errors import UsageError
from servekit.kit.fsmanifest import FILE, SYMLINK, FsState
from servekit.kit.models import KitManifest
from servekit.vocabulary import atomic_write_text

NONCE_FILE = "smoke-nonce.txt"
NONCE = re.compile(r"[0-9a-f]{32}")
# Files the base brings (not the kit): the proof changes when the rootfs is another one.
BASE_WITNESSES = ("/etc/os-release",)
_MAX_HOPS = 40


def issue_nonce(out: Path) -> str:
    """A fresh nonce for this verify run, written to ``out/smoke-nonce.txt``."""
    nonce = secrets.token_hex(16)
    atomic_write_text(out / NONCE_FILE, nonce + "\n")
    return nonce


def read_nonce(path: Path) -> str:
    """The nonce an earlier ``kit verify --out`` issued (its smoke-nonce.txt)."""
    try:
        with path.open("rb") as fh:
            data = fh.read(256)
    except OSError as exc:
        raise UsageError(
            f"--nonce {path}: cannot read ({exc.strerror}); give the smoke-nonce.txt"
            " that kit verify --out wrote"
        ) from None
    text = data.decode("ascii", "replace").strip()
    if not NONCE.fullmatch(text):
        raise UsageError(
            f"--nonce {path}: not a nonce kit verify issued; give the smoke-nonce.txt"
            " that kit verify --out wrote"
        )
    return text


def witnesses(m: KitManifest) -> list[str]:
    """The image paths the proof covers, in the order selftest.sh reads them."""
    return [p.path for p in m.payload] + list(BASE_WITNESSES)


def _resolve(state: FsState, path: str) -> str | None:
    """``path`` with every symlink followed inside the image (as the kernel would in a chroot)."""
    parts = [p for p in path.split("/") if p]
    done = "/"
    hops = 0
    while parts:
        part = parts.pop(0)
        if part in (".", ".."):
            done = done if part == "." else posixpath.dirname(done)
            continue
        step = posixpath.join(done, part)
        entry = state.get(step)
        if entry is None:
            return None
        if entry.kind == SYMLINK:
            hops += 1
            if hops > _MAX_HOPS:
                return None
            if entry.link.startswith("/"):
                done = "/"
            parts = [p for p in entry.link.split("/") if p] + parts
            continue
        done = step
    return done


def _digest(state: FsState, path: str) -> str:
    real = _resolve(state, path)
    entry = state.get(real) if real else None
    if entry is None or entry.kind != FILE:
        return "absent"
    return entry.sha256.removeprefix("sha256:")


def expected_proof(paths: list[str], state: FsState, nonce: str) -> str:
    """The proof selftest.sh must print for ``nonce`` inside this rebuilt image.

    ``paths``: :func:`witnesses` of the kit; ``state``: the rebuilt image's
    filesystem as the rebuild read it back.
    """
    text = f"nonce {nonce}\n" + "".join(f"{_digest(state, p)}\n" for p in paths)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
