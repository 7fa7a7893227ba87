"""What failed on a node, in its own words: the last error a folder's process printed.

A node's output is every process it started, interleaved (a DP launcher's
children write to the same stderr as ``run.sh``). When a node starts no engine,
the refusal quotes the failing process's last error lines and names which
process printed them, read from that output:

- a Python traceback: the exception line, the folder's script it ran (the
  outermost frame under the scripts folder, ``launch_online_dp.py:10`` and its
  source line), the module it was raised in when that is not the folder's
  (``inside subprocess``), and a multiprocessing child's name (``Process-1``)
  with how many processes printed the same error;
- a shell error (``/root/script/run_prefill.sh: 4: foo: not found``): the script
  and its line;
- else the last line printed.

The fake platform's own noise is dropped first (the loader's complaint about the
inherited ``LD_PRELOAD`` that the platform sets to see what a process inherits).
Text is made printable and bounded (:func:`servekit.importer.contain.shown`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from servekit.importer.contain import shown

SCRIPT_DIR = "/root/script"
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
_EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")
_SHELL = re.compile(r"^(?P<file>[^\s:]+\.sh): (?:line )?(?P<line>\d+): (?P<message>.+)$")
_CHILD = re.compile(r"^Process (?P<name>[\w.-]+):$")
TRACEBACK = "Traceback (most recent call last):"
EXCEPTION_WORDS = ("Error", "Exception", "Exit", "Interrupt", "Warning", "Fault")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str
    source: str = ""

    @property
    def name(self) -> str:
        return PurePosixPath(self.file).name

    @property
    def in_folder(self) -> bool:
        return self.file.startswith(SCRIPT_DIR + "/")


@dataclass(frozen=True)
class Failure:
    """The last error one of a node's processes printed, and which process printed it."""

    process: str
    error: str
    where: str = ""
    inside: str = ""
    child: str = ""
    times: int = 1

    def text(self) -> str:
        if not self.process:  # a line of its own, no telling who printed it
            return shown(self.error, 600)
        who = self.process
        if self.child:
            who += f" (its child process {self.child}"
            who += f"; {self.times} processes printed the same)" if self.times > 1 else ")"
        elif self.times > 1:
            who += f" ({self.times} processes printed the same)"
        inside = f" inside {self.inside}" if self.inside else ""
        where = f" at {self.where}" if self.where else ""
        return shown(f"{who} failed{inside}: {self.error}{where}", 600)


def _noise(line: str, inherited: Iterable[str]) -> bool:
    return any(value and value in line for value in inherited)


def _is_exception(line: str) -> bool:
    m = _EXCEPTION.match(line)
    return m is not None and m["type"].split(".")[-1].endswith(EXCEPTION_WORDS)


def _frames_before(lines: Sequence[str], end: int) -> tuple[list[Frame], str]:
    """The frames of the traceback ending at ``end`` (its exception line), outermost first,
    and the multiprocessing child that printed it, if one announced itself.

    Two processes' tracebacks may interleave line by line: the frames are read back
    only to the previous exception line, and the child's name above the nearest header.
    """
    frames: list[Frame] = []
    i = end - 1
    while i >= 0 and lines[i] == lines[end]:  # the same error, from a twin printed in step
        i -= 1
    while i >= 0 and lines[i] != TRACEBACK and not _is_exception(lines[i]):
        m = _FRAME.match(lines[i])
        if m is not None:
            source = lines[i + 1].strip() if i + 1 < end and not _FRAME.match(lines[i + 1]) else ""
            frames.append(Frame(m["file"], int(m["line"]), m["func"], source))
        i -= 1
    while i >= 0 and lines[i] != TRACEBACK:
        i -= 1
    child = ""
    for j in range(i - 1, max(i - 4, -1), -1):  # "Process Process-1:" just above the header
        if (m := _CHILD.match(lines[j])) is not None:
            child = m["name"]
            break
    return frames[::-1], child


def _from_traceback(lines: Sequence[str], end: int) -> Failure:
    frames, child = _frames_before(lines, end)
    mine = [f for f in frames if f.in_folder]
    script = mine[0] if mine else (frames[0] if frames else None)
    last_mine = mine[-1] if mine else None
    after = frames[frames.index(last_mine) + 1 :] if last_mine is not None else []
    inside = ""
    if after:
        module = PurePosixPath(after[0].file).stem
        inside = f"{module}.{after[0].func}" if after[0].func != "<module>" else module
    where = ""
    if last_mine is not None:
        where = f"{last_mine.name}:{last_mine.line}"
        where += f" ({last_mine.source})" if last_mine.source else ""
    return Failure(
        process=script.name if script is not None else "a Python process",
        error=lines[end].strip(),
        where=where,
        inside=inside,
        child=child,
    )


def last_error(stderr: str, inherited: Iterable[str] = ()) -> Failure | None:
    """The last error a node's processes printed (see the module docstring), or None."""
    values = tuple(inherited)
    lines = [line.rstrip() for line in stderr.splitlines() if not _noise(line, values)]
    lines = [line for line in lines if line.strip()]
    if not lines:
        return None
    for end in range(len(lines) - 1, -1, -1):
        line = lines[end]
        if not line[:1].isspace() and _is_exception(line) and TRACEBACK in lines[:end]:
            found = _from_traceback(lines, end)
            same = sum(1 for x in lines if x.strip() == found.error)
            return Failure(found.process, found.error, found.where, found.inside, found.child, same)
        if (m := _SHELL.match(line)) is not None:
            name = PurePosixPath(m["file"]).name
            return Failure(name, m["message"], where=f"{name}:{m['line']}")
    return Failure("", lines[-1].strip())
