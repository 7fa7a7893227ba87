"""A folder that waits for something the platform never provides is refused at once.

The fake platform gives a node what ModelArts gives it (docs/importer.md, "What the
platform provides") and nothing else: a script polling a file at another path, or a
variable the platform does not set, would poll until the import's time limit. While
the nodes run, :class:`Watch` looks at what they printed and recorded: a node that
repeats one line (digits aside) :data:`REPEATS` times and prints nothing new nor
starts anything for :data:`QUIET_S`, or every node idle for :data:`SILENT_S`, is
waiting. The refusal names what it waited for: an
absolute path in the repeated line, else the wait loops the folder's scripts hold
(``while [ ! -f PATH ]``, ``until [ -n "$VAR" ]``), by file and line.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servekit.importer.platform.harness import NodeProcess, read_tail

REPEATS = 4
QUIET_S = 3.0
SILENT_S = 20.0
MAX_SCRIPT_BYTES = 1024 * 1024
# What the platform's inherited LD_PRELOAD makes every process print: not a wait.
NOISE = "cannot be preloaded"
_DIGITS = re.compile(r"\d+")
_PATH = re.compile(r"(/[A-Za-z0-9_.+-]+(?:/[A-Za-z0-9_.+-]+)+)")
_LOOP = re.compile(r"^\s*(while|until)\b")
_FILE_TEST = re.compile(r"-[efsrd]\s+\"?(\$\{?[A-Za-z_][A-Za-z0-9_]*[^\"\s\]]*|/[^\"\s\]]+)")
_VAR_TEST = re.compile(r"-[zn]\s+\"?\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def wait_loops(folder: Path) -> list[str]:
    """Each wait loop of the folder's scripts: ``the file "$X" (a.sh:12)``, ``$VAR (b.sh:3)``."""
    found: list[str] = []
    for script in sorted(p for p in folder.rglob("*.sh") if p.is_file() and not p.is_symlink()):
        try:
            with script.open("rb") as fh:
                text = fh.read(MAX_SCRIPT_BYTES).decode(errors="replace")
        except OSError:
            continue
        lines = text.splitlines()
        for number, line in enumerate(lines, start=1):
            if line.lstrip().startswith("#") or not _LOOP.match(line):
                continue
            where = f"{script.relative_to(folder).as_posix()}:{number}"
            # the loop's own line and the next few (a test inside its body)
            body = " ".join(lines[number - 1 : number + 4])
            if match := _FILE_TEST.search(body):
                found.append(f"the file {match.group(1)} ({where})")
            elif match := _VAR_TEST.search(body):
                found.append(f"the variable ${match.group(1)} ({where})")
    return found


@dataclass
class _Seen:
    """A node's progress: distinct lines printed (digits aside) and processes recorded."""

    distinct: int = 0
    records: int = 0
    since: float = field(default_factory=time.monotonic)


@dataclass
class Watch:
    """Looks at running nodes; :meth:`waiting` says what one of them waits for, or None."""

    nodes: Sequence[NodeProcess]
    folder: Path
    started: float = field(default_factory=time.monotonic)
    seen: dict[int, _Seen] = field(default_factory=dict)

    def _output(self, node: NodeProcess) -> list[str]:
        base = node.platform.node_dir(node.index)
        return (read_tail(base / "stdout") + "\n" + read_tail(base / "stderr")).splitlines()

    def waiting(self) -> str | None:
        """What a node waits for (one line), when the nodes are waiting; else None."""
        now = time.monotonic()
        alive = [n for n in self.nodes if n.popen.poll() is None]
        if not alive:
            return None
        idle = []
        for node in alive:
            lines = [line.strip() for line in self._output(node) if line.strip()]
            counts = Counter(_DIGITS.sub("#", line) for line in lines)
            records = len(list(node.platform.record_dir.glob(f"*-n{node.index}-*.json")))
            seen = self.seen.setdefault(node.index, _Seen())
            if (len(counts), records) != (seen.distinct, seen.records):
                self.seen[node.index] = _Seen(len(counts), records, now)
                continue
            quiet = now - seen.since
            idle.append(node)
            repeated = sorted(
                (line for line, n in counts.items() if n >= REPEATS and NOISE not in line),
                key=lambda line: "wait" not in line.lower(),
            )
            if repeated and quiet >= QUIET_S:
                return self._explain(node.index, repeated[0])
        if len(idle) == len(alive) and all(
            now - self.seen[n.index].since >= SILENT_S for n in alive
        ):
            return self._explain(alive[0].index, None)
        return None

    def _explain(self, node: int, line: str | None) -> str:
        loops = wait_loops(self.folder)
        what = None
        if line is not None and (path := _PATH.search(line)):
            what = f"the file {path.group(1)}"
            where = [w for w in loops if w.startswith("the file")]
            if where:
                what += f" ({where[0].rpartition('(')[2].rstrip(')')})"
        elif loops:
            what = loops[0]
        said = f'; it repeats "{line[:120]}"' if line is not None else ""
        if what is None:
            what = "something it never names (no output, no wait loop in its scripts)"
        return (
            f"node {node} waits for {what}, which the platform never provides{said}; "
            "docs/importer.md lists what it does (the rank table at "
            "/user/global/config/global_rank_table.json, hostname, hostname -I)"
        )
