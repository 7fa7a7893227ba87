"""Member-path rules shared by every archive servekit reads.

A tar member names a path inside an image root. These rules turn the name into
one canonical form (``/etc/passwd``) and refuse the shapes that let a naive
extractor write outside its target: absolute names, ``..`` components, link
targets that climb out of the root.
"""

from __future__ import annotations

import posixpath

from servekit.kit.errors import KitRefused

ROOT = "/"
MAX_PATH = 4096
MAX_DEPTH = 256
HEX = frozenset("0123456789abcdef")


def member_path(name: str, what: str) -> str:
    """Canonical image path of a tar member name, or refuse it.

    ``./etc/x``, ``etc/x`` and ``etc/x/`` all become ``/etc/x``; the root itself
    becomes ``/``. Absolute names and ``..`` components are refused because
    layers never need them and extractors follow them.
    """
    if "\x00" in name:
        raise KitRefused(f"{what}: member name {name[:80]!r} contains a NUL byte")
    if name.startswith("/"):
        raise KitRefused(
            f"{what}: member {name[:80]!r} has an absolute path; layers use relative names"
        )
    parts = _parts(name, what)
    if ".." in parts:
        raise KitRefused(f"{what}: member {name[:80]!r} contains '..'; refusing a path escape")
    return ROOT + "/".join(parts)


def _parts(name: str, what: str) -> list[str]:
    """The non-empty components of a name, within the length and depth bounds."""
    if len(name) > MAX_PATH:
        raise KitRefused(f"{what}: name {name[:80]!r}... is longer than {MAX_PATH} characters")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if len(parts) > MAX_DEPTH:
        raise KitRefused(f"{what}: name {name[:80]!r}... is deeper than {MAX_DEPTH} folders")
    return parts


WHITEOUT_PREFIX = ".wh."
OPAQUE = ".wh..wh..opq"


def whiteout_named(path: str) -> str | None:
    """The component of ``path`` that OCI layers read as a whiteout (``.wh.x``,
    ``.wh..wh..opq``), or None.

    A file by such a name is not shipped as a file: applying the layer removes
    ``x`` (or a whole folder) from the base instead, so a payload may not carry one.
    Whiteouts a kit means are written by servekit from a spec's ``remove`` and
    ``opaque`` lists and recorded per layer in MANIFEST.json.
    """
    for part in path.split("/"):
        if part.startswith(WHITEOUT_PREFIX):
            return part
    return None


def whiteout_path(path: str) -> str:
    """The whiteout member that removes ``path`` from lower layers (``/a/.wh.b``)."""
    return posixpath.join(posixpath.dirname(path), WHITEOUT_PREFIX + posixpath.basename(path))


def image_path(path: str, what: str) -> str:
    """Check a path a manifest records: canonical (``/a/b``), no ``..``, within bounds.

    Paths read back from a kit's own lists must already be in the form
    :func:`member_path` gives; anything else (``a/b``, ``/a//b``, ``/a/``) is
    refused rather than normalised, because it was not written by servekit.
    """
    if path == ROOT:
        return path
    parts = _parts(path, what)
    if (
        not path.startswith("/")
        or "\x00" in path
        or ROOT + "/".join(parts) != path
        or ".." in parts
    ):
        raise KitRefused(f"{what}: path {path[:80]!r} is not a canonical image path like /opt/x")
    return path


def hardlink_target(linkname: str, what: str) -> str:
    """Canonical path of a hardlink target (relative to the archive root)."""
    if linkname.startswith("/"):
        raise KitRefused(
            f"{what}: hardlink target {linkname[:80]!r} is absolute; refusing an escape"
        )
    parts = _parts(linkname, what)
    if ".." in parts or not parts:
        raise KitRefused(f"{what}: hardlink target {linkname[:80]!r} escapes the image root")
    return ROOT + "/".join(parts)


def symlink_escapes(path: str, target: str) -> bool:
    """Whether a relative symlink at ``path`` climbs above the image root.

    Absolute targets resolve inside the image root when the image runs, so only
    relative ``..`` chains that pass the root count as escapes.
    """
    if target.startswith("/"):
        return False
    depth = path.rstrip("/").count("/") - 1
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


def parents(path: str) -> list[str]:
    """Ancestors of an image path, outermost first, without the root."""
    out: list[str] = []
    head = posixpath.dirname(path)
    while head not in ("/", ""):
        out.append(head)
        head = posixpath.dirname(head)
    out.reverse()
    return out


def escape_field(text: str) -> str:
    """Make a path one whitespace-free field of a manifest line (reversible)."""
    out: list[str] = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch.isprintable() and ch != " ":
            out.append(ch)
        else:
            for byte in ch.encode("utf-8", "surrogateescape"):
                out.append(f"\\x{byte:02x}")
    return "".join(out)


def _is_hex2(text: str) -> bool:
    return len(text) == 2 and HEX.issuperset(text)


def unescape_field(text: str) -> str:
    """Inverse of :func:`escape_field`."""
    if "\\" not in text:
        return text
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and text[i + 1 : i + 2] == "\\":
            out += b"\\"
            i += 2
        elif ch == "\\" and text[i + 1 : i + 2] == "x" and _is_hex2(text[i + 2 : i + 4]):
            out.append(int(text[i + 2 : i + 4], 16))
            i += 4
        elif ch == "\\":
            raise ValueError(f"bad escape at {i} in {text[:80]!r}")
        else:
            out += ch.encode("utf-8", "surrogateescape")
            i += 1
    return out.decode("utf-8", "surrogateescape")
