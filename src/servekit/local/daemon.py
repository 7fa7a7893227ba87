"""``python -m servekit.local.daemon RUN_DIR``: the detached supervisor.

``servekit up --detach`` prepares the run directory and starts this in its own
session; it reads ``launch.json`` (nothing re-derived) and supervises until
``servekit down`` sends SIGTERM or a process dies. Progress goes to
``state.json``, which the detached ``up`` watches.
"""

from __future__ import annotations

import sys
from pathlib import Path

from servekit.local.rundir import RunDir
from servekit.local.runspec import RunSpec
from servekit.local.supervisor import Supervisor


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python -m servekit.local.daemon RUN_DIR [READY_TIMEOUT_S]", file=sys.stderr)
        return 2
    run = RunDir(Path(argv[0]))
    spec = RunSpec.model_validate_json(run.launch.read_text())
    timeout = float(argv[1]) if len(argv) == 2 else 600.0
    code = Supervisor(spec, ready_timeout_s=timeout).run()
    print(f"supervisor finished with exit code {code}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
