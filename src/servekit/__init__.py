"""servekit: vLLM-family serving layouts as software.

The catalog, the Plan and every surface derived from it (launch scripts, local
runs, the simulator, acceptance, benchmarks, image kits, release reports).
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
