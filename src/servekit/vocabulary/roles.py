"""The roles an endpoint plays, one set of words for every package.

An engine is ``mixed`` (serves whole requests), ``prefill`` or ``decode`` (the two
halves of a PD pair); a Plan also starts a ``proxy``; a deployment may also name
a ``reference`` engine to compare against; the proxy keeps its instances in
pools, the PD halves and ``replica``. The wider sets are built from the narrower
ones, so adding a role is one edit. Standard library only: the proxy's zipapp
imports it.
"""

from __future__ import annotations

from typing import Literal, get_args

Role = Literal["mixed", "prefill", "decode"]
"""What an engine serves: whole requests, or one half of a PD pair."""
ROLES: tuple[Role, ...] = get_args(Role)

PdRole = Literal["prefill", "decode"]
"""The two halves of a prefill/decode (PD) pair."""
PD_ROLES: tuple[PdRole, ...] = get_args(PdRole)

ProcessRole = Literal[Role, "proxy"]
"""What a process a Plan starts serves: an engine's role or the proxy."""

EndpointRole = Literal[ProcessRole, "reference"]
"""What a deployment's endpoint is: a process, or a reference engine to compare with."""

ProxyPool = Literal[PdRole, "replica"]
"""The proxy's instance pools: the PD halves, or replicas that serve whole requests."""
PROXY_POOLS: tuple[ProxyPool, ...] = get_args(ProxyPool)
