"""``nodes.elastic=on`` (issue 41): an instance of a role group beyond the rendered ones,
on new machines, from the rendered ``scale/<group>/run.sh``.

The rendered scripts run as an operator runs them: ``run.sh`` under bash with
``DRY_RUN=1`` (every command printed, nothing started) for the derivations and the
refusals, and for real on the fake nodes cluster (:mod:`servekit.platforms.nodes.fake`,
simulated engines) for the join and the leave.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from tests.helpers.cli import servekit_inproc

from servekit.catalog import load
from servekit.errors import UsageError
from servekit.platforms.api import render_target
from servekit.platforms.nodes.scale import scale_groups
from servekit.platforms.nodes.settings import parse_settings, settings_table
from servekit.proxy import join
from servekit.proxy.admin import Change
from servekit.proxy.config import parse_args
from servekit.render import apply_overrides, build_plan, write_files

ELASTIC = ["nodes.elastic=on"]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "modelarts.md"
MULTI = "a2/deepseekv4-flash/2p1x2d"  # decode: one instance on two nodes (one headless)
LAYERWISE = "a3/qwen3.5-397b-a17b/1p1x2d"  # decoders call the proxy back (its node's address)
WIDE = "a3/deepseekv4-flash/2p2d"  # two instances a group, 4 and 16 processes a node
EVENTS = "a3/glm5.1/1x2p1x2d"  # KV-event publishers
BOOTSTRAP = "local/1p1d-mooncake"  # bootstrap mode (its proxy moved off loopback)
BOOTSTRAP_SETS = ["proxy.host=0.0.0.0"]


def _render(name: str, out: Path, sets: list[str] | None = None) -> Path:
    _, files = render_target(name, "nodes", [*ELASTIC, *(sets or [])])
    write_files(files, out)
    return out


def _run(
    script: Path, args: list[str], env: dict[str, str], *, dry: bool = True
) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"], "NODE_NIC": "eth9", "BUNDLE_DIR": "/opt/bundle",
            "SERVEKIT_ADMIN_KEY": "k", **({"DRY_RUN": "1"} if dry else {})}  # fmt: skip
    return subprocess.run(["bash", str(script), *args], env=base | env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def _sections(out: str) -> dict[str, list[str]]:
    """``# name`` headed blocks of a DRY_RUN's output."""
    found: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("# "):
            current = line[2:]
            found[current] = []
        elif current is not None:
            found[current].append(line)
    return found


CLUSTER = {f"NODE{i}_IP": f"10.0.0.{i + 1}" for i in range(8)}


@pytest.mark.parametrize("name", [MULTI, LAYERWISE, pytest.param(WIDE, marks=pytest.mark.slow)])
def test_an_index_beyond_runs_instance_0s_processes_with_its_own_id_and_nodes(
    name: str, tmp_path: Path
) -> None:
    """Every node of instance g (several indexes beyond the rendered ones) runs what the
    rendered instance 0's node runs when its nodes are the new addresses, but for the
    engine id: the rule's, printed by the script and written into the KV config."""
    out = _render(name, tmp_path / "r")
    plan = build_plan(load(name).layout)
    for group in scale_groups(plan):
        first_id = next(p.engine_id for p in plan.processes if p.engine == group.engines[0])
        for index in (group.rendered, group.rendered + 40):
            new = [f"10.9.{index}.{j + 1}" for j in range(group.size)]
            for rank, procs in enumerate(group.template):
                node = group.instances[0][rank]
                done = _run(out / "scale" / group.name / "run.sh", [str(index), *new],
                            CLUSTER | {"NODE_RANK": str(rank)})  # fmt: skip
                assert done.returncode == 0, done.stderr
                derived = group.rule.engine_id(index)
                if first_id is not None:
                    assert f"engine id {derived}" in done.stdout
                mine = _sections(done.stdout)
                moved = {f"NODE{n}_IP": new[j] for j, n in enumerate(group.instances[0])}
                for p in procs:
                    original = p.name.removeprefix("scaled.")
                    ref = _run(out / f"node{node}" / f"{original}.sh", [],
                               CLUSTER | moved | {"NODE_IP": new[rank]})  # fmt: skip
                    assert ref.returncode == 0, ref.stderr
                    want = ref.stdout.splitlines()
                    if first_id is not None:
                        want = [w.replace(f'"engine_id":"{first_id}"', f'"engine_id":"{derived}"')
                                for w in want]  # fmt: skip
                        assert any(f'"engine_id":"{derived}"' in w for w in mine[p.name])
                    assert mine[p.name] == want, (name, group.name, index, p.name)


def test_engine_ids_stay_unique_across_groups_and_any_number_of_indexes() -> None:
    """Every id derived for 2,000 indexes of every group of a many-group layout is new:
    none twice, none a rendered one; the script's arithmetic is the rule's."""
    for name in (WIDE, MULTI, "a2/deepseekv4-flash/2p2d"):
        plan = build_plan(load(name).layout)
        groups = scale_groups(plan)
        rendered = {p.engine_id for p in plan.processes if p.engine_id is not None}
        derived = [str(g.rule.engine_id(i)) for g in groups for i in range(g.rendered, 2000)]
        assert len(set(derived)) == len(derived), name
        assert not rendered & set(derived), name


def test_the_join_and_leave_name_the_new_listeners_as_the_admin_api_takes_them(
    tmp_path: Path,
) -> None:
    """KV-event publishers and, in bootstrap mode, the derived engine id and bootstrap
    server, each at the new machine's address, in a body the proxy's admin API parses."""
    for name, sets in ((EVENTS, []), (BOOTSTRAP, BOOTSTRAP_SETS)):
        out = _render(name, tmp_path / name.replace("/", "_"), sets)
        plan = build_plan(apply_overrides(load(name).layout, sets))
        for group in scale_groups(plan):
            new = [f"10.9.0.{j + 1}" for j in range(group.size)]
            for kv in ("1", "0"):
                done = _run(out / "scale" / group.name / "run.sh", ["5", *new],
                            CLUSTER | {"KV_EVENTS": kv})  # fmt: skip
                assert done.returncode == 0, done.stderr
                words = _sections(done.stdout)
                args = words["join"]
                body = join.parse([*args, "--pids", "1"]).body()
                change = Change.parse(body)
                assert change.role == group.pool and all(new[0] in u for u in change.urls)
                assert bool(change.publishers) == (kv == "1")  # the engines publish only then
                for _, pub in change.publishers:
                    assert new[0] in str(pub)
                if group.pool == "prefill" and name == BOOTSTRAP:
                    [(_, (engine, server))] = change.bootstraps
                    assert engine == str(group.rule.engine_id(5))
                    assert server.startswith(f"http://{new[0]}:")
                    scaled = "\n".join(line for k, v in words.items() if k.startswith("scaled.")
                                        for line in v)  # fmt: skip
                    assert f'"engine_id":"{engine}"' in scaled
                leave = words["leave"]
                assert leave[leave.index("--urls") + 1].startswith(f"http://{new[0]}:")


def test_the_proxy_serves_its_admin_api_keyed_from_the_env_or_a_file(tmp_path: Path) -> None:
    out = _render(MULTI, tmp_path / "env", ["nodes.drain_grace=5", "nodes.pool_wait=7"])
    env = {"PATH": os.environ["PATH"], "DRY_RUN": "1", **CLUSTER}
    argv = subprocess.run(["sh", str(out / "node0" / "proxy.sh")], env=env, text=True,
                          capture_output=True, check=True).stdout.splitlines()  # fmt: skip
    config = parse_args(argv[argv.index("--host") :], read_keys=False)
    assert config.admin and config.admin_key_env == "SERVEKIT_ADMIN_KEY"
    assert (config.drain_grace_s, config.pool_wait_s) == (5.0, 7.0)
    assert config.prefill and config.decode  # the rendered instances stay listed
    # node 0's run.sh refuses to start without the key (its env.sh)
    done = _run(out / "node0" / "run.sh", [], CLUSTER | {"SERVEKIT_ADMIN_KEY": ""})
    assert done.returncode != 0 and "SERVEKIT_ADMIN_KEY" in done.stderr
    keyed = _render(MULTI, tmp_path / "file", ["nodes.admin_key_file=/etc/servekit/admin.key"])
    argv = subprocess.run(["sh", str(keyed / "node0" / "proxy.sh")], env=env, text=True,
                          capture_output=True, check=True).stdout.splitlines()  # fmt: skip
    config = parse_args(argv[argv.index("--host") :], read_keys=False)
    assert config.admin_key_file == "/etc/servekit/admin.key" and config.admin_key_env is None
    run_sh = (keyed / "scale" / "decode" / "run.sh").read_text()
    assert "--key-file /etc/servekit/admin.key" in run_sh and "SERVEKIT_ADMIN_KEY" not in run_sh


def test_without_elastic_nothing_changes(tmp_path: Path) -> None:
    _, plain = render_target(MULTI, "nodes", [])
    _, off = render_target(MULTI, "nodes", ["nodes.elastic=off"])
    assert plain == off
    assert not [p for p in plain if p.startswith("scale/")]
    assert "--admin" not in str(plain["node0/proxy.sh"])


@pytest.mark.parametrize(
    ("sets", "said"),
    [
        (["nodes.elastic=yes"], "--set nodes.elastic='yes': choose one of on, off"),
        (["nodes.drain_grace=5"], "is for nodes.elastic=on"),
        ([*ELASTIC, "nodes.drain_wait=1e3"], "nodes.drain_wait='1e3': give whole seconds"),
        ([*ELASTIC, "nodes.admin_key_file=key"], "give an absolute path"),
        ([*ELASTIC, "nodes.admin_key_file=/etc/../key"], "give an absolute path"),
        (["nodes.scale=on"], "not a setting of --target nodes"),
    ],
)
def test_bad_settings_are_one_line_and_exit_2(sets: list[str], said: str, tmp_path: Path) -> None:
    args = ["render", MULTI, "--target", "nodes", "--out", str(tmp_path / "o")]
    done = servekit_inproc(*args, *[x for s in sets for x in ("--set", s)])
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], lines
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("name", "sets", "said"),
    [
        ("a3/glm5.1/1node", [], "this layout has no proxy for new instances to join"),
        ("a3/dsv41-ced-pd", [], "the proxy listens on 127.0.0.1 only"),
        (WIDE, ["engines.prefill1.settings.max_num_seqs=7"],
         "prefill1.dp0 differs from prefill0.dp0 in more than its engine id and nodes"),
    ],
)  # fmt: skip
def test_what_it_does_not_handle_is_refused_in_one_line(
    name: str, sets: list[str], said: str
) -> None:
    with pytest.raises(UsageError, match=re.escape(said)):
        render_target(name, "nodes", [*ELASTIC, *sets])


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["1;touch CANARY", "10.9.0.1", "10.9.0.2"], {}, "usage"),
        (["$(touch CANARY)", "10.9.0.1", "10.9.0.2"], {}, "usage"),
        (["-1", "10.9.0.1", "10.9.0.2"], {}, "usage"),
        (["1234567", "10.9.0.1", "10.9.0.2"], {}, "usage"),
        (["0", "10.9.0.1", "10.9.0.2"], {}, "is a rendered one"),
        (["1", "10.9.0.1"], {}, "spans 2 node(s): give 2 address(es)"),
        (["1", "$(touch CANARY)", "10.9.0.2"], {}, "give an IP address or a host name"),
        (["1", "a b", "10.9.0.2"], {}, "give an IP address or a host name"),
        (["1", "10.9.0.1", "10.9.0.2"], {"NODE_RANK": "2"}, "NODE_RANK 2"),
        (["1", "10.9.0.1", "10.9.0.2"], {"NODE0_IP": ""}, "set NODE0_IP"),
        (["1", "10.9.0.1", "10.9.0.2"], {"SERVEKIT_ADMIN_KEY": ""}, "SERVEKIT_ADMIN_KEY"),
        (["1", "10.9.0.1", "10.9.0.2"], {"JOIN_TIMEOUT": "1h"}, "JOIN_TIMEOUT"),
        (["stop", "$(touch CANARY)"], {}, "usage"),
        (["stop", "4"], {}, "no instance 4 of decode runs from here"),
    ],
)
def test_hostile_arguments_are_refused_and_never_run(
    args: list[str], env: dict[str, str], said: str, tmp_path: Path
) -> None:
    out = _render(MULTI, tmp_path / "r")
    canary = tmp_path / "CANARY"
    args = [a.replace("CANARY", str(canary)) for a in args]
    done = _run(out / "scale" / "decode" / "run.sh", args, CLUSTER | env, dry=False)
    assert done.returncode == 2, (args, done.stdout, done.stderr)
    assert said in done.stderr, done.stderr
    assert not canary.exists()
    assert not (out / "scale" / "decode" / "logs").exists()  # nothing started


def test_the_settings_table_is_in_the_docs() -> None:
    assert settings_table() in DOCS.read_text(), "docs/modelarts.md: paste settings_table()"
    assert parse_settings({}) == parse_settings({"elastic": "off"})


def test_plan_md_says_how_a_new_instance_starts(tmp_path: Path) -> None:
    _, files = render_target(MULTI, "nodes", ELASTIC)
    page = str(files["plan.md"])
    for group in ("decode", "prefill0", "prefill1"):
        assert f"bash ./scale/{group}/run.sh INDEX ADDRESS..." in page
    assert json.loads(str(files["plan.json"]))["layout"] == MULTI
