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

A nonce must also have been issued here, and answers once: :func:`issue_nonce`
records it in the user's state folder (``$XDG_STATE_HOME/servekit/kit-nonces``),
and :func:`redeem_nonce` removes the record when a log that answers it passes.
Without the record, anyone who has the kit and the base could pick a nonce,
compute the digest from the rebuilt image (nothing run) and hand in a log that
passes, as often as they like.
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
from servekit.userdirs import state_dir
from servekit.vocabulary import atomic_write_text

NONCE_FILE = "smoke-nonce.txt"
NONCE = re.compile(r"[0-9a-f]{32}")
# Files the base brings (not the kit): the proof changes when the rootfs is another one.
BASE_WITNESSES = ("/etc/os-release",)
_MAX_HOPS = 40


def nonce_ledger() -> Path:
    """The folder recording each nonce issued and not yet answered (one empty file each)."""
    return state_dir() / "kit-nonces"


def issue_nonce(out: Path) -> str:
    """A fresh nonce for this verify run, recorded as issued and written to ``out/smoke-nonce.txt``."""
    nonce = secrets.token_hex(16)
    ledger = nonce_ledger()
    ledger.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ledger / nonce).touch(mode=0o600, exist_ok=False)
    atomic_write_text(out / NONCE_FILE, nonce + "\n")
    return nonce


def was_issued(nonce: str) -> bool:
    """Whether ``nonce`` was issued by :func:`issue_nonce` here and not yet redeemed."""
    return NONCE.fullmatch(nonce) is not None and (nonce_ledger() / nonce).is_file()


def redeem_nonce(nonce: str) -> bool:
    """Use ``nonce`` up; False when it was not issued or another run redeemed it first.

    Removing the record is the one atomic step, so of two runs handing in the
    same log at once only one passes.
    """
    if NONCE.fullmatch(nonce) is None:
        return False
    try:
        (nonce_ledger() / nonce).unlink()
    except FileNotFoundError:
        return False
    return True


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
