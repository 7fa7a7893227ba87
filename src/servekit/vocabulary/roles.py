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

KvRole = Literal["kv_producer", "kv_consumer", "kv_both"]
"""A KV connector's ``kv_role``: it sends the prompt's KV, receives it, or both."""

KV_ROLE_OF: dict[Role, KvRole] = {"prefill": "kv_producer", "decode": "kv_consumer"}
"""The ``kv_role`` each half of a PD pair runs its connector with (a mixed engine: none)."""


def role_of_kv(kv_role: object) -> Role:
    """The role of an engine whose connector says ``kv_role`` (any other value: mixed).

    Compared, not looked up: a launch line's JSON may hold a list where the word goes.
    """
    for role, kv in KV_ROLE_OF.items():
        if kv == kv_role:
            return role
    return "mixed"


ProxyPool = Literal[PdRole, "replica"]
"""The proxy's instance pools: the PD halves, or replicas that serve whole requests."""
PROXY_POOLS: tuple[ProxyPool, ...] = get_args(ProxyPool)

EndpointGroup = Literal[PdRole, "replicas"]
"""A layout proxy's endpoint lists, by field name: each feeds one pool (replicas: replica)."""
ENDPOINT_GROUPS: tuple[EndpointGroup, ...] = get_args(EndpointGroup)
