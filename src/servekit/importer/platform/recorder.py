"""A recording stand-in for ``vllm`` and for the PD proxy script on the fake platform.

The harness copies this file, unchanged, to ``bin/vllm`` (with its own interpreter
on the first line) and to ``proxy_recorder.py`` (which scripts run as
``python3 "$PROXY_SCRIPT" ...``; the importer also puts it in place of a folder's
own Python helpers). What it stands for: ``vllm`` records an engine; a script
whose name says ``proxy``, or whose flags are a PD proxy's (``--prefiller-hosts``,
``--decoder-hosts``, ``--prefill``, ``--decode``), a proxy; anything else a
``script`` (a helper such as a smoke test, recorded so it is not lost).

Each process writes one JSON record into ``$FAKEPLATFORM_RECORD_DIR``: its argv as
the caller wrote it, the environment it was started with (``/proc/self/environ``,
so nothing the interpreter adds at start-up leaks in), its working directory and
the node index from ``$FAKEPLATFORM_NODE``. Then it exits 0 at once, unless
``FAKEPLATFORM_STAY=1``: then it stays alive until SIGTERM (writing an exit record)
for lifecycle tests. ``FAKEPLATFORM_FAIL_PORT=N`` makes the process whose
``--port`` is N exit with status 3 right after recording, stay or not.

Standard library only: it runs under whatever ``python3`` the scripts find.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

FAIL_STATUS = 3


def _environment() -> dict[str, str]:
    """The environment this process was exec'd with."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        return dict(os.environ)
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        if not item:
            continue
        name, _, value = item.partition(b"=")
        env[os.fsdecode(name)] = os.fsdecode(value)
    return env


def _missing() -> str:
    """``--missing INTERPRETER SCRIPT ARGS...``: the platform's python3 shim stands in for a
    script the node does not have; the interpreter's name, and ``sys.argv`` as the caller
    wrote it (else "")."""
    if len(sys.argv) > 3 and sys.argv[1] == "--missing":
        interpreter = Path(sys.argv[2]).name
        sys.argv = sys.argv[3:]
        return interpreter
    return ""


def _argv(kind: str, interpreter: str = "") -> list[str]:
    """argv as the caller wrote it: ``vllm serve ...`` or ``python3 SCRIPT ...``."""
    if interpreter:
        return [interpreter, *sys.argv]
    if kind == "engine":
        return [Path(sys.argv[0]).name, *sys.argv[1:]]
    interpreter = Path(sys.orig_argv[0]).name if sys.orig_argv else "python3"
    return [interpreter, sys.argv[0], *sys.argv[1:]]


def _write(directory: Path, stem: str, payload: dict[str, object]) -> None:
    tmp = directory / f".{stem}.tmp"
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=True))
    tmp.rename(directory / f"{stem}.json")


def _port(argv: list[str]) -> str | None:
    for i, word in enumerate(argv):
        if word == "--port" and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith("--port="):
            return word.removeprefix("--port=")
    return None


PROXY_FLAGS = ("--prefiller-hosts", "--decoder-hosts", "--prefill", "--decode")


def _kind() -> str:
    name = Path(sys.argv[0]).name
    if name == "vllm":
        return "engine"
    flags = {word.partition("=")[0] for word in sys.argv[1:]}
    if "proxy" in name.lower() or flags & set(PROXY_FLAGS):
        return "proxy"
    return "script"


def main() -> int:
    shimmed = _missing()
    kind = _kind()
    env = _environment()
    if not env.get("FAKEPLATFORM_RECORD_DIR"):
        print("recorder: FAKEPLATFORM_RECORD_DIR is not set", file=sys.stderr)
        return 2
    directory = Path(env["FAKEPLATFORM_RECORD_DIR"])
    # Block SIGTERM before the record exists, so one sent as soon as it appears is not lost.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    argv = _argv(kind, shimmed)
    stem = f"{kind}-n{env.get('FAKEPLATFORM_NODE', 'x')}-{os.getpid()}-{time.monotonic_ns()}"
    _write(
        directory,
        stem,
        {
            "kind": kind,
            "node": int(env.get("FAKEPLATFORM_NODE", "-1")),
            "argv": argv,
            "env": env,
            "cwd": os.getcwd(),
            "pid": os.getpid(),
            "ppid": os.getppid(),
        },
    )
    if env.get("FAKEPLATFORM_FAIL_PORT") and _port(argv) == env["FAKEPLATFORM_FAIL_PORT"]:
        return FAIL_STATUS
    if env.get("FAKEPLATFORM_STAY") != "1":
        return 0
    signum = signal.sigwait({signal.SIGTERM})
    _write(directory, stem + ".exit", {"pid": os.getpid(), "signal": int(signum)})
    return 128 + int(signum)


if __name__ == "__main__":
    sys.exit(main())
