"""Where launchers found the decode guard middleware before it moved to :mod:`servekit.guard`.

``--middleware servekit.proxy.guard_middleware.DecodeGuardMiddleware`` keeps
working; the class, the rule and everything else live in the one
standard-library file :mod:`servekit.guard` (also loadable as a copy on
``PYTHONPATH``, with nothing of servekit installed).
"""

from servekit.guard import DecodeGuardMiddleware, guard_state

__all__ = ["DecodeGuardMiddleware", "guard_state"]
