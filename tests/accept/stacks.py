"""Simulated deployments for the acceptance tests: the simulator behind the real proxy."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from servekit.accept.simstack import SimStack, sim_stack


def pd_spec(
    prefill: dict[str, Any] | None = None,
    decode: dict[str, Any] | None = None,
    reference: dict[str, Any] | None = None,
    max_model_len: int = 8192,
) -> dict[str, Any]:
    """1 prefill + 1 guarded decode + a mixed reference; each keyword adds endpoint fields."""
    common = {"port": 0, "max_model_len": max_model_len}
    return {
        "endpoints": [
            {"name": "prefill", "role": "prefill", "engine_id": "p", **common, **(prefill or {})},
            {
                "name": "decode",
                "role": "decode",
                "engine_id": "d",
                "guard": True,
                **common,
                **(decode or {}),
            },
            {"name": "reference", "role": "mixed", **common, **(reference or {})},
        ]
    }


@contextlib.contextmanager
def sim_pd(
    log_dir: Path,
    *,
    capabilities: tuple[str, ...] = ("retrieval",),
    wait_healthy: bool = True,
    max_model_len: int = 8192,
    speed: float = 1.0,
    **endpoints: dict[str, Any],
) -> Iterator[SimStack]:
    """A 1p1d stack with a reference; ``prefill={...}`` etc. set endpoint fields."""
    spec = {**pd_spec(**endpoints, max_model_len=max_model_len), "time_scale": 1.0 / speed}
    with sim_stack(
        spec, log_dir, reference="reference", capabilities=capabilities, wait_healthy=wait_healthy
    ) as stack:
        yield stack


@contextlib.contextmanager
def sim_replicas(log_dir: Path, seeds: list[int | None]) -> Iterator[SimStack]:
    """Mixed replicas behind a replica proxy; a seed makes that replica disagree."""
    spec = {
        "endpoints": [
            {"name": f"replica{i}", "port": 0, "role": "mixed", "disagree_seed": seed}
            for i, seed in enumerate(seeds)
        ]
    }
    with sim_stack(spec, log_dir) as stack:
        yield stack
