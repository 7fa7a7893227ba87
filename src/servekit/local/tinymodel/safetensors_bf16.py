"""A byte-exact bf16 safetensors writer on numpy alone.

numpy has no bfloat16, and going through torch would make ``pip install
servekit`` heavy. The format is small (a little-endian header length, a JSON
header, raw data), so writing it here with sorted names and no timestamps gives
the same bytes on every machine; the safetensors library reads it back.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt


def to_bf16_bits(values: npt.NDArray[np.float32]) -> npt.NDArray[np.uint16]:
    """Round float32 to bfloat16 (nearest, ties to even) and return the raw bits."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounding = np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))
    return ((bits + rounding) >> np.uint64(16)).astype(np.uint16)


def encode(tensors: Mapping[str, npt.NDArray[np.float32]]) -> bytes:
    """The whole .safetensors file for ``tensors`` stored as BF16."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    chunks: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        data = to_bf16_bits(tensors[name]).astype("<u2").tobytes()
        header[name] = {
            "dtype": "BF16",
            "shape": list(tensors[name].shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + b"".join(chunks)
