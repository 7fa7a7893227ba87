"""The real-engine fixtures' start-up helper leaves nothing running when it fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.local.test_vllm_runs import Project, _wait_up


def test_a_failed_start_brings_down_every_layout_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    downs: list[tuple[str, ...]] = []

    def servekit(self: Project, *args: str, **kw: Any) -> None:
        downs.append(args)

    monkeypatch.setattr(Project, "servekit", servekit)
    failed = subprocess.Popen(
        [sys.executable, "-c", "print('up failed'); raise SystemExit(1)"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    hanging = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    with pytest.raises(AssertionError, match="servekit up local/a failed"):
        _wait_up(Project(tmp_path), {"local/a": failed, "local/b": hanging})
    assert hanging.wait(timeout=30) != 0  # killed, not left to run
    assert downs == [("down", "local/a"), ("down", "local/b")]
