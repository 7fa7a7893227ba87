"""servekit.proxy: the PD / replica router and the decode guard middleware.

Run it with ``python -m servekit.proxy`` (or ``servekit proxy``). This package
imports nothing from the rest of servekit but the stdlib-only ``errors`` and
``guard`` modules, and this ``__init__`` imports nothing at all, so vLLM can
load :mod:`servekit.proxy.guard_middleware` without pulling aiohttp.
"""
