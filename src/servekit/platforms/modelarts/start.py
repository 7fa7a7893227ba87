"""How a ModelArts rendering is started: the job's script folder, one entry on every node."""

from __future__ import annotations

from servekit.platforms.platform import Start
from servekit.render import Plan

SCRIPT_FOLDER = "/root/script"
"""Where ModelArts mounts the job's script folder on every node."""
NOTE = (
    "The entry waits for the rank table (`RANK_TABLE_FILE`), finds its node by pod name "
    "(`NODE_POD_NAME`, default the hostname) or address, and starts that node's processes; "
    "`DRY_RUN=1` prints them instead."
)


def _folder(out: str) -> str:
    return "this folder" if out == "." else f"{out}/"


def start(plan: Plan, out: str) -> Start:
    return Start(
        f"ModelArts: {_folder(out)} is the job's script folder; all {len(plan.nodes)} node(s) "
        "run its one entry",
        (
            f"# upload {_folder(out)} as the job's script folder ({SCRIPT_FOLDER} on every node)",
            f"sh {SCRIPT_FOLDER}/run.sh   # the job's command on every node: reads the rank "
            "table, starts that node's processes",
        ),
        ("run.sh",),
        NOTE,
    )
