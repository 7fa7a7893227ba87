"""What a run looks like while it runs: one JSON file the supervisor keeps current.

The supervisor rewrites ``state.json`` atomically at every change (started,
ready, died, stopped). ``servekit status``, ``down``, the detached ``up`` and the
tests read it; nobody parses logs to learn where things stand.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servekit.fsutil import atomic_write_text

Phase = Literal["starting", "ready", "failed", "stopping", "stopped"]
ProcPhase = Literal["pending", "starting", "ready", "exited"]


class ProcState(BaseModel):
    """One supervised process."""

    model_config = ConfigDict(extra="forbid")

    name: str
    role: str
    kind: str
    url: str | None = None
    port: int | None = None
    pid: int | None = None
    log: Path
    phase: ProcPhase = "pending"
    detail: str = ""
    started_at: float | None = None
    ready_at: float | None = None
    exit_code: int | None = None


class RunState(BaseModel):
    """The whole run: the supervisor, its phase, its processes, and why it ended."""

    model_config = ConfigDict(extra="forbid")

    layout: str
    engine: str
    supervisor_pid: int = Field(default_factory=os.getpid)
    phase: Phase = "starting"
    started_at: float
    ready_at: float | None = None
    message: str = ""
    processes: list[ProcState] = Field(default_factory=list)

    def proc(self, name: str) -> ProcState:
        for p in self.processes:
            if p.name == name:
                return p
        raise KeyError(name)


def write_state(path: Path, state: RunState) -> None:
    atomic_write_text(path, state.model_dump_json(indent=2) + "\n")


def read_state(path: Path) -> RunState | None:
    """The last state written, or None when there is none."""
    try:
        return RunState.model_validate_json(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return fields[0] != "Z"
