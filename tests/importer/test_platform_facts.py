"""The fake platform is the platform: each fact docs/importer.md lists, seen from inside.

One two-node folder written here reports what its node sees as flags of its
``vllm serve`` (the recorder keeps them): the rank table at ModelArts' path, its
keys, no RANK_TABLE_* or PROXY_SCRIPT knob, ``hostname`` and ``hostname -I`` as
the table lists the node, HOME, the script folder, the read-only model mount and
the image's proxy example. The folder is imported once per module. Then the
refusals: a folder waiting for a file or a variable the platform never provides
is refused in one line naming it, well before the time limit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servekit.importer import FolderFacts, ImportRefused, extract_folder
from servekit.importer.platform.normalize import ProcessFacts

PROBE = r"""#!/bin/sh
set -e
t=/user/global/config/global_rank_table.json
me=$(hostname)
ip=$(hostname -I | awk '{print $1}')
rank=$(python3 - "$t" "$me" "$ip" <<'PY'
import json, sys
table = json.load(open(sys.argv[1]))
servers = [s for g in table["server_group_list"] for s in g["server_list"]]
print(next(i for i, s in enumerate(servers) if s["pod_name"] == sys.argv[2] and s["server_ip"] == sys.argv[3]))
PY
)
keys=$(python3 - "$t" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
g = t["server_group_list"][0]
s = g["server_list"][0]
print(",".join([t["status"], t["server_group_count"], g["group_id"], str(len(s["device"])),
                str(s["server_id"] != s["server_ip"]), s["device"][0]["rank_id"]]))
PY
)
model=$( (touch /root/model/x 2>/dev/null && echo writable) || echo read-only)
proxy=/vllm-workspace/vllm-ascend/examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py
case "$rank" in
    0|1) exec vllm serve /root/model --rank "$rank" \
        --knobs "${RANK_TABLE_FILE-unset},${RANK_TABLE_TIMEOUT-unset},${RANK_TABLE_INTERVAL-unset},${PROXY_SCRIPT-unset},${ENV_LOG_FILE-unset}" \
        --table "$keys" --home "$HOME" --here "$(cd "$(dirname "$0")" && pwd)" \
        --model-mount "$model" --image-proxy "$( [ -f "$proxy" ] && echo present || echo absent)" ;;
    *) echo "unexpected rank $rank" >&2; exit 1 ;;
esac
"""


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> FolderFacts:
    folder = tmp_path_factory.mktemp("probe") / "probe-a3" / "2nodes"
    folder.mkdir(parents=True)
    (folder / "run.sh").write_text(PROBE)
    return extract_folder(folder)


def _flags(facts: ProcessFacts) -> dict[str, object]:
    return {name: values[0] for name, values in facts.flags}


def _each_node(seen: FolderFacts) -> list[dict[str, object]]:
    engines = sorted(seen.process_facts(), key=lambda p: p.node)
    assert [p.node for p in engines] == [0, 1]
    return [_flags(p) for p in engines]


def test_each_node_finds_itself_in_the_rank_table_by_hostname_and_ip(seen: FolderFacts) -> None:
    assert [flags["--rank"] for flags in _each_node(seen)] == ["0", "1"]


def test_the_rank_table_has_the_keys_of_a_real_modelarts_table(seen: FolderFacts) -> None:
    # status, server_group_count (group 0 and the rest), group_id, 16 devices (A3), server_id != server_ip,
    # device rank ids numbered per server
    assert {flags["--table"] for flags in _each_node(seen)} == {"completed,2,0,16,True,0"}


def test_no_knob_the_platform_does_not_set(seen: FolderFacts) -> None:
    assert {flags["--knobs"] for flags in _each_node(seen)} == {"unset,unset,unset,unset,unset"}


def test_home_script_folder_and_mounts_at_their_platform_paths(seen: FolderFacts) -> None:
    for flags in _each_node(seen):
        assert flags["--home"] == "/root"
        assert flags["--here"] == "/root/script"
        assert flags["--model-mount"] == "read-only"
        assert flags["--image-proxy"] == "present"


def _waiting(tmp_path: Path, body: str) -> str:
    folder = tmp_path / "wait"
    folder.mkdir()
    (folder / "run.sh").write_text("#!/bin/sh\n" + body + "vllm serve /root/model\n")
    with pytest.raises(ImportRefused) as refused:
        extract_folder(folder, nodes=1, time_limit_s=90)
    message = str(refused.value)
    assert "\n" not in message
    assert "time limit" not in message
    assert str(folder) in message
    return message


@pytest.mark.slow
def test_a_wait_for_a_file_elsewhere_is_refused_naming_the_file(tmp_path: Path) -> None:
    message = _waiting(
        tmp_path,
        "rt=${RANK_TABLE_FILE:-/etc/modelarts/rank_table.json}\n"
        'while [ ! -f "$rt" ]; do echo "waiting for $rt"; sleep 1; done\n',
    )
    assert "waits for the file /etc/modelarts/rank_table.json (run.sh:3)" in message


@pytest.mark.slow
def test_a_silent_wait_for_a_variable_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("servekit.importer.waits.SILENT_S", 3.0)
    message = _waiting(tmp_path, 'while [ -z "$MA_NODE_RANK" ]; do sleep 1; done\n')
    assert "waits for the variable $MA_NODE_RANK (run.sh:2)" in message


def test_a_wait_the_platform_ends_is_not_refused(tmp_path: Path) -> None:
    """Positive control: the same loop on the platform's own path ends and imports."""
    folder = tmp_path / "ok"
    folder.mkdir()
    (folder / "run.sh").write_text(
        "#!/bin/sh\nrt=/user/global/config/global_rank_table.json\n"
        'while [ ! -f "$rt" ]; do echo "waiting for $rt"; sleep 1; done\n'
        "vllm serve /root/model\n"
    )
    facts = extract_folder(folder, nodes=1)
    assert [p.program for p in facts.process_facts()] == [("vllm", "serve", "/root/model")]
