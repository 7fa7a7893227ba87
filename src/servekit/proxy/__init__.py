"""servekit.proxy: the PD / replica router.

Run it with ``python -m servekit.proxy`` (or ``servekit proxy``, or the zipapp
that :func:`servekit.proxy.bundle.build_zipapp` writes). This package imports
nothing from the rest of servekit but the stdlib-only ``errors`` and ``guard``
modules, and from outside the standard library only aiohttp and
prometheus_client, so it runs where only aiohttp is installed. This
``__init__`` imports nothing at all. The decode guard middleware is
:mod:`servekit.guard` (``servekit.proxy.guard_middleware`` is its old name).
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.proxy.bundle import zipapp_bytes as zipapp_bytes
    from servekit.proxy.config import (
        ProxyConfig as ProxyConfig,
        config_from_values as config_from_values,
        flag_of as flag_of,
        option_words as option_words,
        refuse_keys_in_argv as refuse_keys_in_argv,
        to_argv as to_argv,
    )
    from servekit.proxy.discovery_spec import (
        DiscoverySpec as DiscoverySpec,
        Endpoint as Endpoint,
        IdRule as IdRule,
        RoleSpec as RoleSpec,
        WorkerPorts as WorkerPorts,
        spec_from_doc as spec_from_doc,
    )
    from servekit.proxy.join import join_flag as join_flag
    from servekit.proxy.policies import KV_POLICY as KV_POLICY
    from servekit.proxy.server import run as run

__getattr__, __dir__ = lazy_face(__name__)
