"""servekit as a user runs it: a child process of this interpreter, bounded in time.

One place spells the command line, so every test that runs the CLI runs the same
program the same way; a test names only what differs (its working folder, its
environment, its time limit). ``servekit_inproc`` is the fast twin for tests that
need no separate process: the same result shape, from typer's runner.
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path


def wide_env(**extra: str) -> dict[str, str]:
    """This process's environment with tables 200 columns wide, and ``extra`` on top.

    A table cut to the terminal would hide the very cell a test reads.
    """
    return {**os.environ, "COLUMNS": "200", **extra}


def own_homes(root: Path) -> dict[str, str]:
    """Runs, reports and ledgers (``SERVEKIT_RUNS``, XDG data and state) under ``root``.

    A command a test starts then reads and writes only the test's own folders: no
    run, report or ledger of the user's, or of another test, can change its answer.
    """
    return {
        "SERVEKIT_RUNS": str(root / "runs"),
        "XDG_DATA_HOME": str(root / "data"),
        "XDG_STATE_HOME": str(root / "state"),
    }


def runs_env(cwd: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment unless given) with the runs folder under ``cwd``.

    A test's runs (``SERVEKIT_RUNS``) then live in its own temporary folder, never the
    user's, and tables are 200 columns wide so a cell is never cut in what a test reads.
    """
    return {
        **(os.environ if base is None else base),
        "SERVEKIT_RUNS": str(cwd / "runs"),
        "COLUMNS": "200",
    }


def servekit_argv(*args: str) -> list[str]:
    """``python -m servekit ARGS`` as an argv, for tests that start a process themselves."""
    return [sys.executable, "-m", "servekit", *args]


def servekit_cli(
    *args: str,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float | None = 120,
    check: bool = False,
    memory_limit: int | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m servekit ARGS``, its output captured as text.

    ``env`` is the child's whole environment (``None``: this process's); the exit
    code is the test's to assert, unless ``check`` asks for an exception instead.
    ``memory_limit`` caps the child's address space in bytes, so a reader that
    loads too much fails the test instead of the machine.
    """

    def cap() -> None:
        if memory_limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))

    return subprocess.run(
        servekit_argv(*args),
        check=check,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        input=input,
        timeout=timeout,
        preexec_fn=cap if memory_limit is not None else None,
    )


@contextlib.contextmanager
def layout_up(
    layout: str,
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    engine: str | None = None,
    timeout: float = 900,
    down_timeout: float = 300,
) -> Iterator[subprocess.CompletedProcess[str]]:
    """``servekit up LAYOUT [--engine ENGINE] --detach --free-ports``, and ``down`` after.

    The layout is down again however the test ends, so a failed test leaves no
    engine running for the next one; a refused ``up`` fails with its stderr's end.
    """
    chosen = () if engine is None else ("--engine", engine)
    up = servekit_cli(
        "up", layout, *chosen, "--detach", "--free-ports", cwd=cwd, env=env, timeout=timeout
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr[-2000:]
        yield up
    finally:
        servekit_cli("down", layout, cwd=cwd, env=env, timeout=down_timeout)


@contextlib.contextmanager
def tiny_vllm_up(
    layout: str, root: Path, runs: Callable[[str, str], None]
) -> Iterator[dict[str, str]]:
    """LAYOUT up on real vLLM in ``root``, serving the tiny model built there; down after.

    The layout's model path is relative to the working folder, so the tiny model is
    built there (offline, 0.2 s). ``runs`` sets ``SERVEKIT_RUNS`` in this process
    (``monkeypatch.setenv``), so in-process clients find the run too; yields the
    child's environment.
    """
    from servekit.local.tinymodel import build_tiny_model

    runs("SERVEKIT_RUNS", str(root / "runs"))
    env = {**os.environ, "SERVEKIT_RUNS": str(root / "runs")}
    build_tiny_model(root / ".servekit" / "models" / "tiny")
    with layout_up(layout, engine="vllm", cwd=root, env=env):
        yield env


def servekit_inproc(
    *args: str,
    env: Mapping[str, str | None] | None = None,
    cwd: Path | str | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """The CLI run in this process (fast), shaped like :func:`servekit_cli`'s result.

    It goes through ``servekit.cli.main``, the console entry point itself, so a
    refusal is the same one line on stderr and exit code as in a child process.
    ``env`` is laid over this process's environment for the call (a value of None
    removes the name); ``cwd`` is the working folder for the call. An exception that
    ``main`` does not turn into an exit is raised here, so a crash reads as the
    traceback it is rather than as an exit code.
    """
    from typer.testing import CliRunner

    from servekit.cli import main

    code = 0
    argv, here = sys.argv, os.getcwd()
    with CliRunner().isolation(input=input, env=env) as (out, err, _):
        sys.argv = ["servekit", *args]
        try:
            if cwd is not None:
                os.chdir(cwd)
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.argv = argv
            os.chdir(here)
            sys.stdout.flush()
            sys.stderr.flush()
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    return subprocess.CompletedProcess(list(args), code, stdout, stderr)
