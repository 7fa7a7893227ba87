"""The request path's shape, as docs/design.md walks it: each piece calls down, never back.

One request goes app -> flow -> (relay | migration) -> protocols -> stages -> router:
each module imports only those on rows below its own (a protocol handler never
reaches the flow or the relay that called it; the relay and the migration, side by
side, import neither each other nor the flow: the flow hands the relay its
migration as a ``Carrier``), the stream relay is written once, and a failure is
put on an instance in one place, the router. Read from the source, so a shortcut
back up fails here with the import that made it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PROXY = Path(__file__).resolve().parents[2] / "src" / "servekit" / "proxy"

# Top first; a module may import only the modules on rows below its own (not its
# row's others).
PATH: tuple[tuple[str, ...], ...] = (
    ("app",),
    ("flow",),
    ("relay", "migration"),
    ("protocols",),
    ("stages",),
    ("router",),
)
ROW = {name: row for row, names in enumerate(PATH) for name in names}


def _files(piece: str) -> list[Path]:
    folder = PROXY / piece
    return sorted(folder.glob("*.py")) if folder.is_dir() else [PROXY / f"{piece}.py"]


def _proxy_imports(path: Path) -> set[str]:
    """The proxy modules ``path`` imports (top-level pieces: ``protocols.base`` is
    ``protocols``), wherever the import stands."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["servekit", "proxy"] and len(parts) > 2:
                found.add(parts[2])
    return found


def _upward(piece: str, files: list[Path]) -> list[str]:
    """What ``piece``'s ``files`` import from its own row or above it (a protocol
    module may import its own package's base)."""
    return [
        f"{path.name} imports {name}"
        for path in files
        for name in sorted(_proxy_imports(path) - {piece})
        if name in ROW and ROW[name] <= ROW[piece]
    ]


def test_each_piece_of_the_request_path_imports_only_pieces_below_it() -> None:
    assert all(f.is_file() for piece in ROW for f in _files(piece))
    assert [bad for piece in ROW for bad in _upward(piece, _files(piece))] == []


def test_the_relay_imports_nothing_of_the_flow_the_migration_or_a_handler() -> None:
    """The relay is written once for every stage and protocol: it pumps, and asks a
    ``Carrier`` (the migration, handed to it) what follows a broken leg."""
    assert _proxy_imports(PROXY / "relay.py") & {"app", "flow", "migration", "protocols"} == set()
    assert _proxy_imports(PROXY / "migration.py") & {"app", "flow", "relay"} == set()


def test_the_check_sees_an_import_back_up(tmp_path: Path) -> None:
    """Positive control: a handler that reaches back into the flow that called it, even
    from inside a function, is caught; one that calls down is not."""
    back = tmp_path / "back.py"
    back.write_text("def serve():\n    from servekit.proxy.flow import generate\n")
    down = tmp_path / "down.py"
    down.write_text("from servekit.proxy.stages import Stages\n")
    assert _upward("protocols", [back, down]) == ["back.py imports flow"]
    side = tmp_path / "side.py"
    side.write_text("from servekit.proxy.migration import Migration\n")
    assert _upward("relay", [side]) == ["side.py imports migration"]


def _calls(pattern: str) -> set[str]:
    """The proxy modules whose source matches ``pattern``."""
    return {
        str(p.relative_to(PROXY)) for p in PROXY.rglob("*.py") if re.search(pattern, p.read_text())
    }


def test_a_handler_is_called_from_above_only() -> None:
    """The trip this replaced called its handler, which called the trip back (twice per
    attempt); now only the flow, the migration and the handover itself call a handler's
    words, and what a handler is given (the stages) calls none."""
    words = r"\.(hand_over|handoff|decode_first|check)\((self|stages|ticket)"
    assert _calls(words) == {"flow.py", "migration.py", "protocols/base.py"}
    assert not _calls(r"Handler|Handoff") & {"stages.py", "router.py"}


def test_the_stream_relay_and_the_blame_are_written_once() -> None:
    assert _calls(r"web\.StreamResponse\(|_Stream\(") == {"relay.py"}  # the stream's head
    assert _calls(r"resp\.content\.readany\(\)") == {"relay.py", "stages.py"}  # pump, first bytes
    assert _calls(r"\.open_stream\(|\.post_whole\(") == {"stages.py"}  # Stages.decode, once
    assert _calls(r"\.request_failed\(|health\.suspect\(") == {"router.py"}  # Router.blame
