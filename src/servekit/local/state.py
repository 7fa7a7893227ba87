"""What a run looks like while it runs: one JSON file the supervisor keeps current.

The supervisor rewrites ``state.json`` atomically at every change (started,
ready, died, stopped). ``servekit status``, ``down``, the detached ``up`` and the
tests read it; nobody parses logs to learn where things stand.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servekit.errors import first_error
from servekit.vocabulary import atomic_write_text

Phase = Literal["starting", "ready", "failed", "stopping", "stopped"]
ProcPhase = Literal["pending", "starting", "ready", "exited"]
SeenPhase = Literal[Phase, "unsupervised", "dead"]
"""A run's phase as seen now: the recorded one, or what is left when its supervisor died."""


class ProcState(BaseModel):
    """One supervised process."""

    model_config = ConfigDict(extra="forbid")

    name: str
    role: str
    kind: str
    url: str | None = None
    port: int | None = None
    pid: int | None = None
    pid_start: int | None = Field(
        default=None,
        description="the process's start time (clock ticks after boot), recorded at spawn: "
        "a pid that now belongs to another process differs, and is never signalled",
    )
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
    supervisor_start: int | None = Field(
        default=None,
        description="the supervisor's start time (clock ticks after boot): a reused pid differs",
    )
    entry_url: str | None = Field(default=None, description="where clients send requests")
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
    """The last state written, or None when there is none (or it cannot be read)."""
    found = state_or_why(path)
    return found if isinstance(found, RunState) else None


def state_or_why(path: Path) -> RunState | str | None:
    """The last state written; None when there is none; why not, when it cannot be read.

    The supervisor writes state.json atomically, so an unreadable one means a full
    disk or a hand edit: its processes may still run, and callers must say so
    rather than treat the run as absent.
    """
    try:
        return RunState.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot read {path.name} ({exc.strerror})"
    except ValidationError as exc:
        where, msg = first_error(exc)
        return f"{path.name} is not a run state ({where}: {msg})"[:200]


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    fields = _stat(pid)
    return fields is not None and bool(fields) and fields[0] != "Z"


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks after boot (/proc/PID/stat field 22)."""
    fields = _stat(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def proc_alive(proc: ProcState) -> bool:
    """The recorded process still runs: its pid is alive and started when it was recorded.

    A pid with no recorded start time cannot be told from a later process that
    reused it, so it counts as not this run's (never signalled, said by
    :func:`foreign_procs`).
    """
    if proc.pid is None or proc.pid_start is None or not pid_alive(proc.pid):
        return False
    return start_ticks(proc.pid) == proc.pid_start


def foreign_procs(state: RunState) -> list[ProcState]:
    """Recorded processes whose pid is alive but is not (or cannot be shown to be) theirs."""
    return [
        p for p in state.processes if p.pid is not None and pid_alive(p.pid) and not proc_alive(p)
    ]


def foreign_note(state: RunState) -> str:
    """One clause naming the pids left alone because another process holds them now."""
    found = foreign_procs(state)
    if not found:
        return ""
    shown = ", ".join(f"{p.name} pid {p.pid}" for p in found[:5])
    return (
        f"; left alone {shown}: that pid now belongs to another process "
        "(its start time differs from the one recorded at spawn)"
    )


def supervisor_alive(state: RunState) -> bool:
    """The run's supervisor still runs (the same process, not a later one with its pid)."""
    if not pid_alive(state.supervisor_pid):
        return False
    recorded = state.supervisor_start
    return recorded is None or start_ticks(state.supervisor_pid) == recorded


def seen_phase(state: RunState) -> SeenPhase:
    """The recorded phase while the supervisor lives; after it died, what is left.

    ``unsupervised``: the supervisor is gone (killed) but some processes still
    run, with nobody watching them; ``dead``: the supervisor and every process
    are gone without a teardown being recorded.
    """
    if state.phase in ("failed", "stopped") or supervisor_alive(state):
        return state.phase
    if any(proc_alive(p) for p in state.processes):
        return "unsupervised"
    return "dead"
