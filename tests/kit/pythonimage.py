"""A base image with a working python, made from this machine's own files (no registry).

Two layers: POSIX sh plus the coreutils ``selftest.sh`` uses, then a Python
interpreter with exactly the standard library modules the selftest's Python
code loads (found by running that code here), every shared library ``ldd``
lists for them, and a tiny fake ``vllm`` package with a ``__version__``. Files
keep their paths, so the interpreter finds its prefix as it does here.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

TOOLS = ("dirname", "sha256sum")
PROBE = (
    "import importlib, os, py_compile, sys, tempfile\n"
    "print('\\n'.join(sorted({m.__file__ for m in list(sys.modules.values())"
    " if getattr(m, '__file__', None)})))\n"
)
LIB = re.compile(r"(/\S+) \(0x")


def interpreter() -> Path:
    """A python3 whose standard library lies next to it (the distribution's if present)."""
    for candidate in ("/usr/bin/python3", shutil.which("python3") or ""):
        if candidate and Path(candidate).exists():
            return Path(candidate).resolve()
    raise RuntimeError("no python3 on this machine")


def shared_libraries(binary: Path) -> set[Path]:
    """The libraries ``ldd`` says a binary or extension module loads (the loader included)."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False).stdout
    return {Path(m) for m in LIB.findall(out)}


def python_files(python: Path) -> set[Path]:
    """The interpreter, its stdlib landmark and encodings, and every module the probe loads."""
    loaded = subprocess.run(
        [str(python), "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout.split()
    files = {python, *map(Path, loaded)}
    encodings = next(p.parent for p in files if p.parent.name == "encodings")
    files |= set(encodings.glob("*.py"))
    return files


def _add(tar: tarfile.TarFile, path: Path, seen: set[str]) -> None:
    """Add a file under its own path (parents as folders; links as the file they name)."""
    name = str(path).lstrip("/")
    parts = name.split("/")
    for i in range(1, len(parts)):
        folder = "/".join(parts[:i])
        if folder not in seen:
            seen.add(folder)
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
    if name in seen:
        return
    seen.add(name)
    data = path.read_bytes()
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), os.stat(path).st_mode & 0o755
    tar.addfile(info, io.BytesIO(data))


def _layer(files: set[Path], extra: dict[str, tuple[bytes, int]]) -> bytes:
    buf = io.BytesIO()
    seen: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(files):
            _add(tar, path, seen)
        for name, (data, mode) in sorted(extra.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def python_base_layers(vllm_version: str) -> list[bytes]:
    """[tools layer, python layer] for a base image that can run ``selftest.sh image``."""
    sh = Path("/bin/sh").resolve()
    tools = {Path(shutil.which(t) or f"/usr/bin/{t}").resolve() for t in TOOLS}
    libs = set().union(*(shared_libraries(t) for t in {sh, *tools}))
    python = interpreter()
    pyfiles = python_files(python)
    for path in pyfiles:
        if path.suffix == ".so" or path == python:
            libs |= shared_libraries(path)
    stdlib = next(p.parent for p in pyfiles if p.name == "os.py")
    fake = str(stdlib / "vllm" / "__init__.py").lstrip("/")
    tool_layer = _layer(tools | libs, {"bin/sh": (sh.read_bytes(), 0o755), "tmp/": (b"", 0o1777)})
    python_layer = _layer(
        pyfiles,
        {
            fake: (f'__version__ = "{vllm_version}"\n'.encode(), 0o644),
            "usr/bin/python3": (python.read_bytes(), 0o755),
        },
    )
    return [tool_layer, python_layer]
