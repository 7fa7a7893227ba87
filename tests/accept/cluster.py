"""Scripted engines on loopback arranged as a deployment (proxy, PD, reference, replicas)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from servekit.accept.scripted import ScriptedConfig, running_scripted
from servekit.deployment import Deployment, Endpoint


@contextlib.contextmanager
def scripted_pd(
    log_dir: Path,
    *,
    proxy: dict[str, Any] | None = None,
    prefill: dict[str, Any] | None = None,
    decode: dict[str, Any] | None = None,
    reference: dict[str, Any] | None = None,
    capabilities: tuple[str, ...] = ("retrieval",),
    max_model_len: int = 4096,
) -> Iterator[Deployment]:
    """A 1p1d deployment with a proxy and a reference, each a scripted engine.

    The proxy forwards generation to the prefill engine, which answers, and
    mirrors it to the decode engine with kv_transfer_params (which counts the
    handoff in its external prefix-cache metric); the guard check reaches the
    decode engine directly.

    Each keyword adds faults to that endpoint's :class:`ScriptedConfig`; every
    engine logs errors to its own file under ``log_dir`` so the log check has
    something real to read.
    """
    roles = {"prefill": prefill, "decode": decode, "reference": reference, "proxy": proxy}
    with contextlib.ExitStack() as stack:
        endpoints: list[Endpoint] = []
        urls: dict[str, str] = {}
        for role, extra in roles.items():
            log = log_dir / f"{role}.log"
            log.touch()
            fields: dict[str, Any] = {
                "role": role,
                "max_model_len": max_model_len,
                "error_log": log,
                "proxy_counts": (1, 1),
                **(
                    {"forward_to": urls["prefill"], "mirror_to": urls["decode"]}
                    if role == "proxy"
                    else {}
                ),
                **(extra or {}),
            }
            urls[role] = stack.enter_context(running_scripted(ScriptedConfig(**fields)))
            if role != "reference":
                endpoints.append(Endpoint(name=role, role=role, url=urls[role], log=log))
        yield Deployment(
            engine="sim",
            model="scripted",
            entry_url=urls["proxy"],
            endpoints=tuple(endpoints),
            reference_url=urls["reference"],
            capabilities=capabilities,
        )


@contextlib.contextmanager
def scripted_replicas(configs: list[dict[str, Any]]) -> Iterator[Deployment]:
    """Mixed replicas, the first one the entry, no proxy."""
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(running_scripted(ScriptedConfig(**c))) for c in configs]
        yield Deployment(
            model="scripted",
            entry_url=urls[0],
            endpoints=tuple(
                Endpoint(name=f"replica{i}", role="mixed", url=u) for i, u in enumerate(urls)
            ),
        )
