"""One run of ``servekit accept --selfcheck`` for the tests that read it.

The self-check drives the whole acceptance matrix through the real proxy once
per control (about 45 s on two cores). The CLI test asserts on the process
(exit code, files written) and the self-check tests read its result.json, so
one run serves both; their tests share an xdist group so they share the run.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.helpers.cli import runs_env, servekit_cli

SELFCHECK_GROUP = pytest.mark.xdist_group("accept-selfcheck")


@dataclass(frozen=True)
class SelfcheckRun:
    proc: subprocess.CompletedProcess[str]
    out: Path


@pytest.fixture(scope="session")
def selfcheck_run(tmp_path_factory: pytest.TempPathFactory) -> SelfcheckRun:
    here = tmp_path_factory.mktemp("selfcheck-cli")
    proc = servekit_cli(
        "accept", "--selfcheck", "--out", "sc",
        cwd=here, env=runs_env(here, {"PATH": "/usr/bin:/bin"}), timeout=300,
    )  # fmt: skip
    return SelfcheckRun(proc, here / "sc")
