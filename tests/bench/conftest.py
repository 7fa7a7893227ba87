"""Fixtures: the simulator as the engine, the spy in front of it, one per test.

The default engine is fast and exact: a first token as soon as the prompt is
in, then one token per 2 ms step (``decode_step_s``), no speculation. A test
changes it with ``@pytest.mark.parametrize("engine", [Setup(...)], indirect=True)``:
profile fields, faults, what the spy hides or strips, and other clients' load
(a request running beside the N-th completion, one finishing unseen before it,
or one that never ends).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from servekit.sim.testing import RunningSim, running_sim
from servekit.textcontract import encode

from .spy import Hook, Spy

MODEL = "fake-model"
STEP_S = 0.002
PROFILE: dict[str, Any] = {"name": "bench-test", "decode_step_s": [[1, STEP_S]]}
# Beside another request every step takes 0.3 s: long enough for the 0.25 s sampler.
CROWDED = {"decode_step_s": [[1, STEP_S], [2, 0.3]]}


@dataclass(frozen=True)
class Setup:
    """How the simulated engine and the spy behave in one test."""

    profile: dict[str, Any] = field(default_factory=dict)
    faults: dict[str, Any] = field(default_factory=dict)
    hide: tuple[str, ...] = ()
    strip: tuple[str, ...] = ()
    fail_every: int = 0  # the spy answers every k-th completion with 500
    beside_on: frozenset[int] = frozenset()  # another request runs beside these completions
    unseen_on: frozenset[int] = frozenset()  # another request finishes just before these
    busy: bool = False  # another client's request never ends


@dataclass
class Engine:
    """The simulated engine behind the spy; ``url`` is the spy's."""

    sim: RunningSim
    spy: Spy

    @property
    def url(self) -> str:
        return self.spy.url

    @property
    def prompt_tokens(self) -> list[int]:
        return [count_tokens(p) for p in self.spy.prompts]


def count_tokens(text: str) -> int:
    """Tokens of ``text`` as the simulated engine counts them."""
    return len(encode(text))


def sim_spec(setup: Setup) -> dict[str, Any]:
    profile = {**PROFILE, **setup.profile}
    endpoint = {"name": "e", "port": 0, "served_model_name": MODEL, "profile": profile}
    return {"endpoints": [{**endpoint, "faults": setup.faults}]}


def _other(max_tokens: int) -> dict[str, Any]:
    return {"prompt": "another client", "max_tokens": max_tokens, "ignore_eos": True}


def hook_for(setup: Setup) -> Hook:
    async def hook(spy: Spy, n: int) -> web.StreamResponse | None:
        if setup.fail_every and n % setup.fail_every == 0:
            return web.json_response({"error": {"message": "injected"}}, status=500)
        if n in setup.unseen_on:
            await spy.engine_request(_other(1))
        if n in setup.beside_on:
            asyncio.get_running_loop().create_task(spy.engine_request(_other(6)))
            await asyncio.sleep(0.05)  # admitted before the harness's own request
        return None

    return hook


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    setup: Setup = getattr(request, "param", None) or Setup()
    with running_sim(sim_spec(setup)) as sim:
        spy = Spy(sim.url, hide=setup.hide, strip=setup.strip, hook=hook_for(setup))
        with spy:
            load = _other(30_000) if setup.busy else None
            running = load and asyncio.run_coroutine_threadsafe(spy.engine_request(load), spy.loop)
            yield Engine(sim, spy)
            if running:
                running.cancel()
