"""The image contract: generated PNGs read back as the colour they were made of."""

from __future__ import annotations

import struct
import zlib

from hypothesis import given, strategies as st

from servekit.visioncontract import (
    COLOUR_QUESTION,
    COLOURS,
    colour_answer,
    colour_png,
    data_url,
    image_token,
    named_in_order,
    png_colour,
    top_left_pixel,
)


@given(st.sampled_from(sorted(COLOURS)), st.integers(min_value=1, max_value=40))
def test_every_palette_colour_reads_back(name: str, size: int) -> None:
    assert png_colour(data_url(colour_png(name, size))) == name


def test_first_pixel_is_read_whatever_the_row_filter() -> None:
    png = colour_png("blue", 4)
    # Re-encode the rows with filter 1 (Sub): the first pixel is still stored as is.
    sig_ihdr = png[: 8 + 25]
    raw = b"\x01" + bytes(COLOURS["blue"]) + b"\x00\x00\x00" * 3
    idat = zlib.compress(raw * 4)
    crc = struct.pack(">I", zlib.crc32(b"IDAT" + idat))
    chunk = struct.pack(">I", len(idat)) + b"IDAT" + idat + crc
    assert top_left_pixel(sig_ihdr + chunk) == COLOURS["blue"]


@given(st.binary(max_size=64))
def test_anything_that_is_not_a_png_reads_as_no_colour(junk: bytes) -> None:
    assert top_left_pixel(junk) is None or junk.startswith(b"\x89PNG")
    assert png_colour("data:image/png;base64,!!notbase64") is None
    assert png_colour("https://example.com/cat.png") is None


def test_the_colour_answer_and_its_judge() -> None:
    asked = f"{COLOUR_QUESTION}\n{image_token('red')}\n{image_token('blue')}"
    assert colour_answer(asked) == "red, blue."
    assert colour_answer("Describe this. " + image_token("red")) is None
    assert named_in_order("Red, then Blue.", ["red", "blue"])
    assert not named_in_order("blue and red", ["red", "blue"])
    assert not named_in_order("red", ["red", "blue"])
