"""servekit.proxy: the PD / replica router.

Run it with ``python -m servekit.proxy`` (or ``servekit proxy``, or the zipapp
that :func:`servekit.proxy.bundle.build_zipapp` writes). This package imports
nothing from the rest of servekit but the stdlib-only ``errors`` and ``guard``
modules, and from outside the standard library only aiohttp and
prometheus_client, so it runs where only aiohttp is installed. This
``__init__`` imports nothing at all. The decode guard middleware is
:mod:`servekit.guard` (``servekit.proxy.guard_middleware`` is its old name).
"""
