"""Layout folders in shapes none of the source's 25 has, written by servekit's tests.

Each runs on the platform as it is (docs/importer.md, "What the platform
provides": the rank table at /user/global/config/global_rank_table.json,
``hostname``, ``hostname -I``), with no meta.yaml:

- :func:`renamed`: other script names (``node_env.sh``, ``serve_p.sh``,
  ``serve_d.sh``, ``router.sh`` starting a shipped ``pd_router.py``);
- :func:`flat`: one flat ``run.sh``, nothing else; its name says no node count;
- :func:`case_inline`: a ``case`` on the rank with inline ``vllm serve`` and the
  official proxy from the image, which the folder does not ship;
- :func:`python_launcher`: ``run.sh`` hands over to a Python launcher that reads
  the rank table and execs ``vllm serve``;
- :func:`other_entry`: the entry is ``start.sh``, a single node.

The scripts are the project's own; none of the source's text.
"""

from __future__ import annotations

from pathlib import Path

TABLE = "/user/global/config/global_rank_table.json"

# The rank of this node, found in the platform's table by hostname / hostname -I.
RANK = f"""\
rank=$(python3 - {TABLE} "$(hostname)" "$(hostname -I | awk '{{print $1}}')" <<'PY'
import json, sys
table = json.load(open(sys.argv[1]))
servers = [s for g in table["server_group_list"] for s in g["server_list"]]
print(next(i for i, s in enumerate(servers) if sys.argv[2] == s["pod_name"] or sys.argv[3] == s["server_ip"]))
PY
)
addr() {{
    python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); print([s for g in t["server_group_list"] for s in g["server_list"]][int(sys.argv[2])]["server_ip"])' {TABLE} "$1"
}}
"""

COMMON = (
    "--served-model-name shape --max-model-len 8192 --max-num-seqs 16 "
    "--trust-remote-code --gpu-memory-utilization 0.9"
)


def _kv(role: str, port: int, engine: int) -> str:
    return (
        '\'{"kv_connector": "MooncakeConnectorV1", "kv_role": "'
        + role
        + '", "kv_port": "'
        + str(port)
        + '", "engine_id": "'
        + str(engine)
        + '", "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": 16}, '
        '"decode": {"dp_size": 1, "tp_size": 16}}}\''
    )


def _write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def renamed(parent: Path) -> Path:
    """1P1D on two A3 nodes, every file named otherwise; the router is shipped."""
    head = '#!/bin/sh\nset -e\nhere=$(cd "$(dirname "$0")" && pwd)\n. "$here/node_env.sh"\n'
    serve = (
        "#!/bin/sh\nset -e\nexport HCCL_BUFFSIZE=256 OMP_NUM_THREADS=1\n"
        "exec vllm serve /root/model --host 0.0.0.0 --port 7100 --tensor-parallel-size 16 "
        f"{COMMON} --kv-transfer-config "
    )
    router = (
        '#!/bin/sh\nhere=$(cd "$(dirname "$0")" && pwd)\n. "$here/node_env.sh"\n'
        'exec python3 "$here/pd_router.py" --host 0.0.0.0 --port 8080 '
        '--prefiller-hosts "$(addr 0)" --prefiller-ports 7100 '
        '--decoder-hosts "$(addr 1)" --decoder-ports 7100\n'
    )
    run = head + (
        'case "$rank" in\n'
        '    0) sh "$here/router.sh" & exec sh "$here/serve_p.sh" ;;\n'
        '    1) exec sh "$here/serve_d.sh" ;;\n'
        '    *) echo "no role for rank $rank" >&2; exit 1 ;;\n'
        "esac\n"
    )
    return _write(
        parent / "shapeone-a3" / "1p1d",
        {
            "run.sh": run,
            "node_env.sh": RANK,
            "serve_p.sh": serve + _kv("kv_producer", 30000, 0) + "\n",
            "serve_d.sh": serve + _kv("kv_consumer", 30100, 1) + "\n",
            "router.sh": router,
            "pd_router.py": "import aiohttp  # the project's stand-in for a PD router\n",
        },
    )


def flat(parent: Path) -> Path:
    """One mixed engine over two A2 nodes (leader + headless), all in one run.sh."""
    engine = (
        "vllm serve /root/model --host 0.0.0.0 --port 8080 --data-parallel-size 2 "
        '--data-parallel-size-local 1 --data-parallel-address "$(addr 0)" '
        f"--data-parallel-rpc-port 13355 --tensor-parallel-size 8 {COMMON}"
    )
    run = (
        "#!/bin/sh\nset -e\n"
        + RANK
        + 'export HCCL_IF_IP="$(addr "$rank")" OMP_PROC_BIND=false\n'
        + 'case "$rank" in\n'
        + f"    0) exec {engine} ;;\n"
        + f"    1) exec {engine} --headless --data-parallel-start-rank 1 ;;\n"
        + '    *) echo "rank $rank has nothing to run" >&2; exit 1 ;;\n'
        + "esac\n"
    )
    return _write(parent / "shapetwo-a2" / "my-flat-layout", {"run.sh": run})


def case_inline(parent: Path) -> Path:
    """1P1D with inline commands and the image's official proxy (not shipped)."""
    proxy = (
        "python3 /vllm-workspace/vllm-ascend/examples/disaggregated_prefill_v1/"
        "load_balance_proxy_server_example.py --host 0.0.0.0 --port 8080 "
        '--prefiller-hosts "$(addr 0)" --prefiller-ports 7100 '
        '--decoder-hosts "$(addr 1)" --decoder-ports 7100'
    )
    engine = (
        "vllm serve /root/model --host 0.0.0.0 --port 7100 --tensor-parallel-size 16 "
        f"{COMMON} --kv-transfer-config"
    )
    run = (
        "#!/bin/sh\n"
        + RANK
        + 'case "$rank" in\n'
        + f"    0) {proxy} &\n       exec {engine} {_kv('kv_producer', 30000, 0)} ;;\n"
        + f"    1) exec {engine} {_kv('kv_consumer', 30100, 1)} ;;\n"
        + "    *) exit 1 ;;\n"
        + "esac\n"
    )
    return _write(parent / "shapethree-a3" / "pd-inline", {"run.sh": run})


LAUNCHER = f"""\
# servekit test launcher: this node's role from the platform's rank table, then exec vllm.
import json
import os
import socket

table = json.load(open("{TABLE}"))
servers = [s for g in table["server_group_list"] for s in g["server_list"]]
me = os.popen("hostname").read().strip()
rank = next(i for i, s in enumerate(servers) if s["pod_name"] == me)
argv = ["vllm", "serve", "/root/model", "--host", "0.0.0.0", "--port", "8080",
        "--data-parallel-size", str(len(servers)), "--data-parallel-size-local", "1",
        "--data-parallel-address", servers[0]["server_ip"], "--data-parallel-rpc-port", "13399",
        "--tensor-parallel-size", "16"] + "{COMMON}".split()
if rank > 0:
    argv += ["--headless", "--data-parallel-start-rank", str(rank)]
os.environ["HCCL_IF_IP"] = servers[rank]["server_ip"]
os.execvp("vllm", argv)
"""


def python_launcher(parent: Path) -> Path:
    """Two A3 nodes, one mixed engine; a Python launcher picks each node's command."""
    run = '#!/bin/sh\nexec python3 "$(dirname "$0")/launch.py"\n'
    launcher = LAUNCHER.replace("import socket\n", "")
    return _write(parent / "shapefour-a3" / "py-launched", {"run.sh": run, "launch.py": launcher})


def other_entry(parent: Path) -> Path:
    """One A3 node, the entry named start.sh, a helper for the environment."""
    start = (
        '#!/bin/sh\nset -e\nhere=$(cd "$(dirname "$0")" && pwd)\n'
        '. "$here/tuning.env"\n'
        f"exec vllm serve /root/model --host 0.0.0.0 --port 8080 --tensor-parallel-size 16 "
        f"{COMMON}\n"
    )
    env = "export HCCL_BUFFSIZE=512 OMP_NUM_THREADS=1 TASK_QUEUE_ENABLE=1\n"
    return _write(parent / "shapefive-a3" / "solo", {"start.sh": start, "tuning.env": env})
