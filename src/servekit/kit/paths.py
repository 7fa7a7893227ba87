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


def member_path(name: str, what: str) -> str:
    """Canonical image path of a tar member name, or refuse it.

    ``./etc/x``, ``etc/x`` and ``etc/x/`` all become ``/etc/x``; the root itself
    becomes ``/``. Absolute names and ``..`` components are refused because
    layers never need them and extractors follow them.
    """
    if "\x00" in name:
        raise KitRefused(f"{what}: member name {name!r} contains a NUL byte")
    if name.startswith("/"):
        raise KitRefused(f"{what}: member {name!r} has an absolute path; layers use relative names")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise KitRefused(f"{what}: member {name!r} contains '..'; refusing a path escape")
    return ROOT + "/".join(parts)


def hardlink_target(linkname: str, what: str) -> str:
    """Canonical path of a hardlink target (relative to the archive root)."""
    if linkname.startswith("/"):
        raise KitRefused(f"{what}: hardlink target {linkname!r} is absolute; refusing an escape")
    parts = [p for p in linkname.split("/") if p not in ("", ".")]
    if ".." in parts or not parts:
        raise KitRefused(f"{what}: hardlink target {linkname!r} escapes the image root")
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
        elif ch == "\\" and text[i + 1 : i + 2] == "x":
            out.append(int(text[i + 2 : i + 4], 16))
            i += 4
        else:
            out += ch.encode("utf-8", "surrogateescape")
            i += 1
    return out.decode("utf-8", "surrogateescape")
