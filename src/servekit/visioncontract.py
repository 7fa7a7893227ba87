"""The image contract between the acceptance checks and the simulator: solid colours.

A vision check must be answerable by a real vision model and by the simulator
alike, and judged without a model. Solid-colour images do that: the check
sends PNGs filled with colours from :data:`COLOURS` and asks
:data:`COLOUR_QUESTION`; any vision model names them, and the simulator reads
the top-left pixel of each PNG (:func:`png_colour`) and names the nearest
palette colour. The judge wants every colour named, in order.

The top-left pixel needs no full PNG decoder: whatever filter the first row
uses, its first pixel is stored as is, so inflating the image data and reading
the bytes after the filter byte is enough (8-bit RGB or RGBA images). Standard
library only.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
import zlib

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 170, 60),
    "blue": (30, 60, 220),
    "yellow": (240, 220, 40),
    "black": (10, 10, 10),
    "white": (245, 245, 245),
}
COLOUR_QUESTION = "Name the colour of each image, in order, one word per image."
_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_DATA_URL = re.compile(r"^data:image/png;base64,(.*)$", re.DOTALL)
_IMAGE_TOKEN = re.compile(r"<image:([a-z]+)>")
_CHANNELS = {2: 3, 6: 4}  # PNG colour type -> bytes per 8-bit pixel


def colour_png(name: str, size: int = 16) -> bytes:
    """A ``size`` x ``size`` PNG filled with the palette colour ``name``."""
    rgb = bytes(COLOURS[name])

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = (b"\x00" + rgb * size) * size
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (
        _SIGNATURE
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def data_url(png: bytes) -> str:
    """The ``data:image/png;base64,...`` URL of a PNG."""
    return "data:image/png;base64," + base64.b64encode(png).decode()


def top_left_pixel(png: bytes) -> tuple[int, int, int] | None:
    """The RGB of the first pixel of an 8-bit RGB/RGBA PNG; None for anything else."""
    if not png.startswith(_SIGNATURE):
        return None
    at, kind, idat = len(_SIGNATURE), None, b""
    while at + 8 <= len(png):
        length, tag = struct.unpack(">I4s", png[at : at + 8])
        data = png[at + 8 : at + 8 + length]
        if tag == b"IHDR" and len(data) == 13:
            depth, kind = data[8], data[9]
            if depth != 8 or kind not in _CHANNELS:
                return None
        elif tag == b"IDAT":
            idat += data
        at += 12 + length
    if kind is None or not idat:
        return None
    try:
        first = zlib.decompressobj().decompress(idat, 1 + _CHANNELS[kind])
    except zlib.error:
        return None
    return (first[1], first[2], first[3]) if len(first) >= 4 else None


def nearest_colour(rgb: tuple[int, int, int]) -> str:
    """The palette colour closest to ``rgb``."""
    return min(
        COLOURS, key=lambda n: sum((a - b) ** 2 for a, b in zip(COLOURS[n], rgb, strict=True))
    )


def png_colour(url: str) -> str | None:
    """The colour a data-URL PNG shows, or None when it is not a readable PNG."""
    match = _DATA_URL.match(url)
    if match is None:
        return None
    try:
        png = base64.b64decode(match.group(1), validate=True)
    except (binascii.Error, ValueError):
        return None
    pixel = top_left_pixel(png)
    return nearest_colour(pixel) if pixel is not None else None


def image_token(colour: str | None) -> str:
    """How the simulator's "vision encoder" puts an image into the prompt text."""
    return f"<image:{colour}>" if colour else "<image>"


def colour_answer(asked: str) -> str | None:
    """The simulator's answer when ``asked`` (the last user turn) is the colour question."""
    if COLOUR_QUESTION not in asked:
        return None
    seen = _IMAGE_TOKEN.findall(asked)
    return ", ".join(seen) + "." if seen else None


def named_in_order(answer: str, colours: list[str]) -> bool:
    """Whether ``answer`` names every colour of ``colours`` in that order (case ignored)."""
    words = re.findall(r"[a-z]+", answer.casefold())
    at = 0
    for colour in colours:
        try:
            at = words.index(colour, at) + 1
        except ValueError:
            return False
    return True
