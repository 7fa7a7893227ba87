"""The parts ``servekit verify`` joins, as small Protocols.

The flow in :mod:`servekit.verify.run` only knows these interfaces; the real
runner, acceptance suite, benchmark and kit verifier are bound in
:mod:`servekit.verify.adapters`, and tests bind their own. This keeps the
orchestration testable without patching import paths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from servekit.accept import AcceptResult
from servekit.bench import BenchResult, RunSettings, Workload
from servekit.catalog import LoadedLayout
from servekit.deployment import Deployment
from servekit.kit import KitVerifyOptions
from servekit.report import KitCheck
from servekit.verify.identity import Identity, fetch_text, identify
from servekit.vocabulary import Startable

__all__ = ["Acceptor", "Attacher", "Bencher", "Components", "KitVerifier", "Runner"]


class Runner(Protocol):
    """Brings a layout up detached and tears it down.

    ``speed`` (simulated engines only) runs simulated time that many times
    faster; the flow passes it only when the user asked for one.
    """

    def up(
        self, loaded: LoadedLayout, engine: Startable, speed: float | None = None
    ) -> Deployment: ...

    def down(self, loaded: LoadedLayout) -> str: ...


class Attacher(Protocol):
    """Resolves ``--target URL|NAME`` to a running deployment."""

    def __call__(self, target: str) -> Deployment: ...


class Acceptor(Protocol):
    """Runs the acceptance suite, writing its result and evidence under ``out_dir``."""

    def __call__(
        self, deployment: Deployment, out_dir: Path, contexts: Sequence[str]
    ) -> AcceptResult: ...


class Bencher(Protocol):
    """Measures the workloads against the deployment."""

    def __call__(
        self, deployment: Deployment, workloads: Sequence[Workload], settings: RunSettings
    ) -> BenchResult: ...


class KitVerifier(Protocol):
    """Self-checks an image kit archive, writing its evidence under ``options.out``.

    ``options`` is ``kit verify``'s own model: the archive, the evidence folder
    and what the release table's rows need beyond the kit (the repository, the
    base, the smoke log and its nonce, the baseline).
    """

    def __call__(self, options: KitVerifyOptions) -> KitCheck: ...


@dataclass(frozen=True)
class Components:
    """One of each part."""

    runner: Runner
    attach: Attacher
    accept: Acceptor
    bench: Bencher
    kit: KitVerifier
    identify: Callable[[Deployment], Identity] = identify
    """Asks the engines what they are (the real probe also for test doubles: never assumed)."""
    fetch: Callable[[str], str] = fetch_text
    """GET a URL's text (an engine's /sim/state for its speed)."""
