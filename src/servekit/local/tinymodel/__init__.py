"""A deterministic tiny Llama built offline: real weights for real vLLM on a CPU.

``servekit model tiny --out DIR`` calls :func:`build_tiny_model`.
"""

from servekit.local.tinymodel.build import build_tiny_model
from servekit.local.tinymodel.spec import DEFAULT_SPEC, TinySpec

__all__ = ["DEFAULT_SPEC", "TinySpec", "build_tiny_model"]
