"""Fixtures: a fake engine on loopback per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .fake_engine import EngineConfig, FakeEngine


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> Iterator[FakeEngine]:
    config = getattr(request, "param", None) or EngineConfig()
    with FakeEngine(config) as eng:
        yield eng
