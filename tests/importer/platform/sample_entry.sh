#!/bin/sh
# A small launch entry in the platform's manner, to test the fake platform itself:
# wait for the rank table, find this node in it by pod name or IP, resolve the
# NIC holding the IP, set the engine environment, start the proxy in the
# background on rank 0 (after a pause, so the harness must wait for it), and exec
# vllm from a scratch folder. Runs under dash; shellcheck -s sh clean.
set -eu

table=${RANK_TABLE_FILE:?RANK_TABLE_FILE unset}
limit=${RANK_TABLE_TIMEOUT:-30}

table_status() {
    python3 -c '
import json, sys
try:
    print(json.load(open(sys.argv[1])).get("status", ""))
except (OSError, ValueError):
    print("missing")
' "$table"
}

# Prints rank or master IP (field $4) of the node with pod $2 or IP $3.
table_field() {
    python3 -c '
import json, sys
table, pod, ip, field = sys.argv[1:5]
servers = [s for g in json.load(open(table))["server_group_list"] for s in g["server_list"]]
rank = next(i for i, s in enumerate(servers) if s["pod_name"] == pod or s["server_ip"] == ip)
print(rank if field == "rank" else servers[0]["server_ip"])
' "$table" "$1" "$2" "$3"
}

waited=0
while [ "$(table_status)" != completed ]; do
    if [ "$waited" -ge "$limit" ]; then
        echo "[sample] rank table not completed after ${limit}s" >&2
        exit 1
    fi
    sleep 1
    waited=$((waited + 1))
done

pod=$(hostname)
ip=$(hostname -I | awk '{print $1}')
rank=$(table_field "$pod" "$ip" rank)
master=$(table_field "$pod" "$ip" master)
nic=$(ifconfig | awk -v ip="$ip" '
    /^[^[:space:]]/ { name = $1; sub(":", "", name) }
    $1 == "inet" && $2 == ip { print name; exit }
')
[ -n "$nic" ] || { echo "[sample] no NIC holds $ip" >&2; exit 1; }

export AISHIPBOX_NODE_RANK="$rank" NIC_NAME="$nic"
export HCCL_IF_IP="$ip" GLOO_SOCKET_IFNAME="$nic" SAMPLE_SETTING=1
export LD_LIBRARY_PATH="/opt/sample/lib:${LD_LIBRARY_PATH:-}"
unset http_proxy

if [ "$rank" -eq 0 ]; then
    (
        sleep 1
        exec python3 "$PROXY_SCRIPT" --host "$ip" --port 8080 --prefiller-hosts "$master" "$master"
    ) &
fi

mkdir -p "$HOME/scratch"
cd "$HOME/scratch"
exec vllm serve /root/model \
    --port $((7100 + rank)) \
    --data-parallel-address "$master" \
    --enforce-eager \
    --additional-config '{"flag": true, "text": "true"}'
