"""Small layout folders in the source convention, written by servekit's tests.

Each function writes one folder shaped like a case the importer must run (A2
two nodes, a 1x2p1x4d-like PD spanning nodes on both sides, MASTER dispatch with
an API server per node, shared headless workers, a proxy whose script is not
named proxy, host tuning under ``set -e``, a variable exported twice, TODO image
tags). The scripts are the project's own, written for these tests: the same
convention (``run.sh`` dispatching on the rank table, role scripts,
``launch_online_dp.py`` + templates, ``meta.yaml``), none of the source's text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

# The spine: wait for the rank table, export AISHIPBOX_* and MASTER (sourced by run.sh).
SPINE = """\
# servekit test spine: rank table -> AISHIPBOX_* and MASTER (source it).
rt=/user/global/config/global_rank_table.json
tries=0
until [ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("status"))' "$rt" 2>/dev/null)" = completed ]; do
    tries=$((tries + 1))
    [ "$tries" -lt 20 ] || { echo "spine: rank table never completed" >&2; exit 1; }
    sleep 1
done
eval "$(python3 - "$rt" "$(hostname)" <<'PY'
import json, sys
table = json.load(open(sys.argv[1]))
servers = [s for g in table["server_group_list"] for s in g["server_list"]]
rank = next(i for i, s in enumerate(servers) if s["pod_name"] == sys.argv[2])
print(f"export AISHIPBOX_NODE_RANK={rank} AISHIPBOX_NNODES={len(servers)}")
print(f"export AISHIPBOX_GROUP0_SIZE={len(table['server_group_list'][0]['server_list'])}")
print(f"export AISHIPBOX_MASTER_ADDR={servers[0]['server_ip']}")
print(f"export AISHIPBOX_CURRENT_ADDR={servers[rank]['server_ip']}")
print("export AISHIPBOX_ADDRS='" + " ".join(s["server_ip"] for s in servers) + "'")
print("export MASTER=" + ("true" if rank == 0 else "false"))
PY
)"
"""

# A role script's head: this node's NIC from its IP, socket bindings, a cache folder.
ROLE_HEAD = """\
#!/bin/sh
set -e
nic=$(ifconfig | awk -v ip="$AISHIPBOX_CURRENT_ADDR" '/^[^ \\t]/ {n = $1; sub(":", "", n)} $1 == "inet" && $2 == ip {print n; exit}')
export HCCL_SOCKET_IFNAME="$nic" GLOO_SOCKET_IFNAME="$nic" HCCL_IF_IP="$AISHIPBOX_CURRENT_ADDR"
export HCCL_BUFFSIZE=512
mkdir -p /root/kernel_cache && cd /root/kernel_cache
"""

LAUNCH_DP = """\
# servekit test DP launcher: start N local DP instances of a template script.
import argparse
import subprocess

parser = argparse.ArgumentParser()
parser.add_argument("--template", required=True)
parser.add_argument("--dp-size-local", type=int, required=True)
parser.add_argument("--dp-rank-start", type=int, required=True)
parser.add_argument("--port-start", type=int, required=True)
args = parser.parse_args()
children = [
    subprocess.Popen(["sh", args.template, str(args.dp_rank_start + i), str(args.port_start + i)])
    for i in range(args.dp_size_local)
]
raise SystemExit(max(child.wait() for child in children))
"""

# A DP launcher that crashes on the platform: each DP rank is a multiprocessing child that
# dies with a TypeError inside subprocess (an int in the environment it passes), while the
# launcher itself exits 0: its node starts no engine and says why only on stderr.
LAUNCH_DP_CRASHING = """\
# servekit test DP launcher whose children die inside subprocess.
import argparse
import multiprocessing
import os
import subprocess

parser = argparse.ArgumentParser()
parser.add_argument("--template", required=True)
parser.add_argument("--dp-size-local", type=int, required=True)
parser.add_argument("--dp-rank-start", type=int, required=True)
parser.add_argument("--port-start", type=int, required=True)
args = parser.parse_args()


def rank(index):
    env = dict(os.environ, DP_RANK=index)
    subprocess.run(["sh", args.template, str(index), str(args.port_start + index)], env=env)


children = [
    multiprocessing.Process(target=rank, args=(args.dp_rank_start + i,))
    for i in range(args.dp_size_local)
]
for child in children:
    child.start()
for child in children:
    child.join()
"""

META = """\
source: https://example.invalid/tutorials/{model}.html
derived: 2026-06-01
vllm: 0.21.0
vllm_ascend: {image}
verified: {verified}
notes: 'servekit test folder {model}'
"""


def serve(flags: Sequence[str], model: str = "test-model") -> str:
    """``exec vllm serve /root/model`` with ``flags``, one per line."""
    lines = ["exec vllm serve /root/model", f"    --served-model-name {model}", *flags]
    return " \\\n    ".join(line.strip() for line in lines) + "\n"


def dispatch(nodes: int, cases: Mapping[str, str], *, check: bool = True) -> str:
    """run.sh: source the spine, check the node count, exec the role of this rank."""
    text = '#!/bin/sh\nset -e\nhere=$(cd "$(dirname "$0")" && pwd)\n. "$here/setup_rank_env.sh"\n'
    if check:
        text += (
            f'if [ "$AISHIPBOX_NNODES" != {nodes} ]; then\n'
            f'    echo "[run] expected {nodes} nodes, got $AISHIPBOX_NNODES" >&2; exit 1\nfi\n'
        )
    text += 'case "$AISHIPBOX_NODE_RANK" in\n'
    for pattern, command in cases.items():
        text += f"    {pattern}) {command} ;;\n"
    text += f'    *) echo "[run] unexpected rank (want 0..{nodes - 1})" >&2; exit 1 ;;\nesac\n'
    return text


def write(folder: Path, files: Mapping[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def meta(
    model: str, image: str = "quay.io/example/vllm-ascend:test", verified: str = "false"
) -> str:
    return META.format(model=model, image=image, verified=verified)


def a2_two_nodes(parent: Path) -> Path:
    """A2 (8 NPUs per node): one mixed engine, DP 2 x TP 8, leader + headless."""
    common = ["--tensor-parallel-size 8", "--data-parallel-size 2", "--data-parallel-size-local 1"]
    leader = ROLE_HEAD + serve(
        [*common, "--port 8080", '--data-parallel-address "$AISHIPBOX_MASTER_ADDR"']
    )
    worker = ROLE_HEAD + serve(
        [
            *common,
            "--headless",
            "--data-parallel-start-rank 1",
            '--data-parallel-address "$AISHIPBOX_MASTER_ADDR"',
        ]
    )
    return write(
        parent / "testmodel-a2" / "2nodes",
        {
            "run.sh": dispatch(
                2, {"0": 'exec "$here/run_node0.sh"', "1": 'exec "$here/run_node1.sh"'}
            ),
            "setup_rank_env.sh": SPINE,
            "run_node0.sh": leader,
            "run_node1.sh": worker,
            "meta.yaml": meta("testmodel-a2"),
        },
    )


def _dp_template(role: str, kv_role: str, kv_port: int, dp_size: int, tp: int) -> str:
    kv = json.dumps(
        {"kv_connector": "MooncakeConnectorV1", "kv_role": kv_role, "kv_port": str(kv_port)}
    )
    return ROLE_HEAD + serve(
        [
            '--port "$2"',
            f"--data-parallel-size {dp_size}",
            '--data-parallel-rank "$1"',
            '--data-parallel-address "$MASTER_OF_ROLE"',
            f"--tensor-parallel-size {tp}",
            "--max-num-seqs 16",
            f"--kv-transfer-config '{kv}'",
        ]
    )


def _launcher(role: str, local: int, port: int) -> str:
    return (
        "#!/bin/sh\nset -e\n"
        'here=$(cd "$(dirname "$0")" && pwd)\n'
        f'export MASTER_OF_ROLE="${{{role.upper()}_MASTER:?}}"\n'
        f'exec python3 "$here/launch_online_dp.py" --template "$here/run_dp_template_{role}.sh" '
        f"--dp-size-local {local} --dp-rank-start $(( (AISHIPBOX_NODE_RANK - $FIRST) * {local} )) "
        f"--port-start {port}\n"
    )


def pd_spanning(parent: Path) -> Path:
    """1x2p1x4d-like: a prefill instance on nodes 0-1 (DP 2, one per node) and a decode
    instance on nodes 2-5 (DP 8, two per node), external DP via launch_online_dp.py;
    the proxy on node 0 runs in the background before node 0's own launcher."""
    proxy = (
        "#!/bin/sh\nset -e\n"
        "set -- $AISHIPBOX_ADDRS\n"
        "exec python3 /opt/official/pd_proxy.py --host 0.0.0.0 --port 8080 "
        '--prefiller-hosts "$1" --prefiller-ports 7100 '
        '--decoder-hosts "$3" --decoder-ports 7200\n'
    )
    env = 'set -- $AISHIPBOX_ADDRS; export PREFILL_MASTER="$1" DECODE_MASTER="$3"; '
    run = dispatch(
        6,
        {
            "0": env
            + '(sleep 1; sh "$here/run_proxy.sh") & export FIRST=0; exec sh "$here/run_prefill.sh"',
            "1": env + 'export FIRST=0; exec sh "$here/run_prefill.sh"',
            "2|3|4|5": env + 'export FIRST=2; exec sh "$here/run_decode.sh"',
        },
    )
    return write(
        parent / "testmodel-a3" / "1x2p1x4d",
        {
            "run.sh": run,
            "setup_rank_env.sh": SPINE,
            "run_proxy.sh": proxy,
            "run_prefill.sh": _launcher("prefill", 1, 7100),
            "run_decode.sh": _launcher("decode", 2, 7200),
            "run_dp_template_prefill.sh": _dp_template("prefill", "kv_producer", 30000, 2, 16),
            "run_dp_template_decode.sh": _dp_template("decode", "kv_consumer", 30100, 8, 8),
            "launch_online_dp.py": LAUNCH_DP,
            "meta.yaml": meta("testmodel-a3"),
        },
    )


def master_dispatch(parent: Path) -> Path:
    """Dispatch on MASTER (no node-count check): an API server on each node, DP rank each."""

    def node(rank: int) -> str:
        return ROLE_HEAD + serve(
            [
                "--port 8080",
                "--data-parallel-size 2",
                f"--data-parallel-rank {rank}",
                '--data-parallel-address "$AISHIPBOX_MASTER_ADDR"',
                "--api-server-count 1",
            ]
        )

    run = (
        '#!/bin/sh\nset -e\nhere=$(cd "$(dirname "$0")" && pwd)\n. "$here/setup_rank_env.sh"\n'
        'case "$MASTER" in\n    true) exec sh "$here/run_node0.sh" ;;\n'
        '    false) exec sh "$here/run_node1.sh" ;;\n'
        '    *) echo "[run] MASTER=$MASTER" >&2; exit 1 ;;\nesac\n'
    )
    return write(
        parent / "promodel-a3" / "2nodes",
        {
            "run.sh": run,
            "setup_rank_env.sh": SPINE,
            "run_node0.sh": node(0),
            "run_node1.sh": node(1),
            "meta.yaml": meta("promodel-a3"),
        },
    )


def shared_headless(parent: Path) -> Path:
    """4 nodes, one engine: rank 0 leader, ranks 1..3 one shared headless script."""
    common = [
        "--tensor-parallel-size 8",
        "--data-parallel-size 4",
        "--data-parallel-size-local 1",
        '--data-parallel-address "$AISHIPBOX_MASTER_ADDR"',
    ]
    leader = ROLE_HEAD + serve([*common, "--port 8080"])
    headless = ROLE_HEAD + serve(
        [*common, "--headless", '--data-parallel-start-rank "$AISHIPBOX_NODE_RANK"']
    )
    return write(
        parent / "testmodel-a3" / "4nodes",
        {
            "run.sh": dispatch(
                4, {"0": 'exec "$here/run_node0.sh"', "1|2|3": 'exec "$here/run_node_headless.sh"'}
            ),
            "setup_rank_env.sh": SPINE,
            "run_node0.sh": leader,
            "run_node_headless.sh": headless,
            "meta.yaml": meta("testmodel-a3"),
        },
    )


def layerwise_proxy(parent: Path) -> Path:
    """1p1x2d-like with a vendored layerwise proxy named without "proxy", run by path."""

    def engine(kv_role: str, rank: int, port: int) -> str:
        kv = json.dumps({"kv_connector": "MooncakeLayerwiseConnector", "kv_role": kv_role})
        return ROLE_HEAD + serve(
            [
                f"--port {port}",
                f"--kv-transfer-config '{kv}'",
                f"--data-parallel-rank {rank}",
                "--data-parallel-size 2" if kv_role == "kv_consumer" else "--data-parallel-size 1",
            ]
        )

    router = (
        "#!/bin/sh\nset -e\nset -- $AISHIPBOX_ADDRS\n"
        "exec python3 /root/script/lw_router.py --port 8080 "
        '--prefiller-hosts "$1" --prefiller-ports 7100 --decoder-hosts "$2" "$3" '
        "--decoder-ports 7200 7200\n"
    )
    return write(
        parent / "testmodel-a3" / "1p1x2d",
        {
            "run.sh": dispatch(
                3,
                {
                    "0": '(sleep 1; sh "$here/run_router.sh") & exec sh "$here/run_prefill_node0.sh"',
                    "1": 'exec sh "$here/run_decode_node0.sh"',
                    "2": 'exec sh "$here/run_decode_node1.sh"',
                },
            ),
            "setup_rank_env.sh": SPINE,
            "run_router.sh": router,
            # A vendored proxy serves HTTP (it imports an HTTP module), so the import
            # records its command line and never runs it.
            "lw_router.py": (
                "import aiohttp\nraise SystemExit('the real router must never run in an import')\n"
            ),
            "run_prefill_node0.sh": engine("kv_producer", 0, 7100),
            "run_decode_node0.sh": engine("kv_consumer", 0, 7200),
            "run_decode_node1.sh": engine("kv_consumer", 1, 7200),
            "meta.yaml": meta("testmodel-a3", image="TODO"),
        },
    )


def tuned_single(parent: Path) -> Path:
    """One node: host tuning under set -e, LD_LIBRARY_PATH exported twice, TODO image tag."""
    run = (
        "#!/bin/sh\nset -e\n"
        "export LD_LIBRARY_PATH=/opt/first/lib:${LD_LIBRARY_PATH:-}\n"
        "export OMP_NUM_THREADS=1\n"
        "echo performance | tee /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor\n"
        "sysctl -w vm.swappiness=0\n"
        "sysctl kernel.sched_migration_cost_ns=50000\n"
        "echo 1 > /proc/sys/kernel/numa_balancing\n"
        "export LD_LIBRARY_PATH=/opt/second/lib:${LD_LIBRARY_PATH:-}\n"
        + serve(["--port 8080", "--tensor-parallel-size 16", "--max-num-seqs 16"], "tuned")
    )
    return write(
        parent / "tunedmodel-a3" / "1node",
        {
            "run.sh": run,
            "meta.yaml": meta("tunedmodel-a3", image="TODO  # no tag upstream", verified="true"),
        },
    )


def crashing_launcher(parent: Path, *, proxy: bool) -> Path:
    """One node: (with ``proxy``) the proxy in the background, then a prefill and a decode
    launcher whose DP children all die with a TypeError inside subprocess."""
    run = (
        '#!/bin/sh\nset -e\nhere=$(cd "$(dirname "$0")" && pwd)\n. "$here/setup_rank_env.sh"\n'
        "export PREFILL_MASTER=127.0.0.1 DECODE_MASTER=127.0.0.1 FIRST=0\n"
        + ('(sleep 1; sh "$here/run_proxy.sh") &\n' if proxy else "")
        # the prefill's launcher a second later: both launchers' children crashing at
        # once interleaved their tracebacks line by line on a loaded machine
        + '(sleep 1; sh "$here/run_prefill.sh") &\nexec sh "$here/run_decode.sh"\n'
    )
    proxy_sh = (
        "#!/bin/sh\nexec python3 /opt/official/pd_proxy.py --host 0.0.0.0 --port 8080 "
        "--prefiller-hosts 127.0.0.1 --prefiller-ports 7100 "
        "--decoder-hosts 127.0.0.1 --decoder-ports 7200\n"
    )
    return write(
        parent / "testmodel-a3" / "1node",
        {
            "run.sh": run,
            "setup_rank_env.sh": SPINE,
            "run_proxy.sh": proxy_sh,
            "run_prefill.sh": _launcher("prefill", 1, 7100),
            "run_decode.sh": _launcher("decode", 1, 7200),
            "run_dp_template_prefill.sh": _dp_template("prefill", "kv_producer", 30000, 1, 8),
            "run_dp_template_decode.sh": _dp_template("decode", "kv_consumer", 30100, 1, 8),
            "launch_online_dp.py": LAUNCH_DP_CRASHING,
            "meta.yaml": meta("testmodel-a3"),
        },
    )
