"""``render --target k8s``: the Plan's topology and the ModelArts rendering, process by process.

For every catalog layout: one LeaderWorkerSet per engine group with the Plan's
instance count and nodes per instance, the devices per pod; every process's argv
and environment equal to the ModelArts rendering's but for the values the
rendering records as changed (addresses, and device ids counted within a pod),
each with its reason. One layout's pods are also run under bash (DRY_RUN) with
the environment LWS injects, against the ModelArts scripts.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.helpers.cli import servekit_inproc
from tests.platforms.rendered import (
    CATALOG,
    LAYOUTS,
    PD_LAYOUTS,
    files,
    objects,
    plan,
    rendering,
)

from servekit.platforms import render_files
from servekit.platforms.k8s.wiring import REASONS
from servekit.render import ProcessPlan
from servekit.render.envvalues import template_value


def _env(p: ProcessPlan) -> dict[str, str]:
    return {key: template_value(key, value) for key, value in p.env.items()}


def _argv(p: ProcessPlan) -> list[str]:
    """Words with each reference shown as ${VAR} (what a script's words say)."""
    from servekit.render import Word

    out = []
    for arg in p.command:
        if isinstance(arg, str):
            out.append(arg)
        else:
            text = "".join(x if isinstance(x, str) else "${" + x.var + "}" for x in arg.parts)
            out.append(text if arg.when is None else "${" + arg.when.var + ":+" + text + "}")
            assert isinstance(arg, Word)
    return out


def test_groups_are_the_plans_topology() -> None:
    for name in LAYOUTS:
        r, p = rendering(name), plan(name)
        engines = {x.engine for x in p.processes if x.engine}
        assert sorted(e for g in r.groups for e in g.engines) == sorted(engines), name
        for g in r.groups:
            for engine in g.engines:
                nodes = {x.node for x in p.processes if x.engine == engine}
                assert g.size == len(nodes), (name, g.name)
            for pod in g.pods:
                want = {
                    d
                    for x in p.processes
                    if x.engine == pod.processes[0].engine and x.node == pod.node
                    for d in x.devices
                }
                assert set(pod.devices) == want
        lws = {o["metadata"]["name"]: o for o in objects(name) if o["kind"] == "LeaderWorkerSet"}
        assert set(lws) == {g.name.replace("sk-", "sk-", 1) for g in r.groups}, name
        for g in r.groups:
            spec = lws[g.name]["spec"]
            assert spec["replicas"] == g.replicas and spec["leaderWorkerTemplate"]["size"] == g.size
            assert spec["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
            container = spec["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
            devices = len(g.leader().devices)
            resources = container["resources"]
            assert resources["limits"] == resources["requests"]
            assert {"cpu", "memory", "ephemeral-storage"} <= set(resources["limits"])
            accel = {k: v for k, v in resources["limits"].items() if k not in BASE}
            want = ACCELERATOR.get(CATALOG[name].hardware.accelerator)
            assert accel == ({want: str(devices)} if devices and want else {}), name


ACCELERATOR = {"ascend-a3": "huawei.com/ascend-1980", "ascend-a2": "huawei.com/Ascend910"}
BASE = {"cpu", "memory", "ephemeral-storage"}


@pytest.mark.parametrize("name", ["a3/glm5.1/1x2p1x4d", "a2/glm5.2/1x4p1x4d", "local/1p1d"])
def test_accelerator_per_hardware(name: str) -> None:
    hw = CATALOG[name].hardware.accelerator
    for obj in objects(name):
        if obj["kind"] == "LeaderWorkerSet":
            c = obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
            assert set(c["resources"]["limits"]) - BASE == (
                {ACCELERATOR[hw]} if hw in ACCELERATOR else set()
            )


def test_every_process_equals_modelarts_but_for_recorded_changes() -> None:
    """argv and env per process: a difference is a recorded Change, and each has a reason."""
    seen: dict[str, int] = {}
    for name in LAYOUTS:
        r, p = rendering(name), plan(name)
        recorded = {(c.process, c.where, c.modelarts, c.k8s) for c in r.changes}
        for c in r.changes:
            assert c.reason in REASONS
            seen[c.reason] = seen.get(c.reason, 0) + 1
        for ma in p.processes:
            k8s = r.processes[ma.name]
            a, b = _argv(ma), _argv(k8s)
            assert len(a) == len(b), (name, ma.name)
            for x, y in zip(a, b, strict=True):
                if x != y:
                    assert (ma.name, "argv", x, y) in recorded, (name, ma.name, x, y)
            ea, eb = _env(ma), _env(k8s)
            assert set(ea) == set(eb), (name, ma.name)
            for key in ea:
                if ea[key] != eb[key]:
                    assert any(c[:2] == (ma.name, f"env {key}") for c in recorded), (name, key)
            if ma.bind_host != k8s.bind_host:
                assert any(c[:2] == (ma.name, "BIND_HOST") for c in recorded)
            assert ma.settings == k8s.settings and ma.devices == k8s.devices
    # the catalog exercises every kind of change (so none is dead code)
    # (elastic, incarnation: only with k8s.elastic=on, recorded there:
    # tests/platforms/test_k8s_elastic.py; workers: only with k8s.proxy_workers,
    # tests/platforms/test_k8s_proxies.py)
    assert set(seen) == set(REASONS) - {"elastic", "incarnation", "workers"}, seen


def _dry(script: Path, env: dict[str, str]) -> str:
    out = subprocess.run(
        ["bash", str(script), *env.pop("ARGS", "").split()],
        env={"PATH": os.environ["PATH"], **env, "DRY_RUN": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


@pytest.mark.slow
def test_pods_under_bash_print_the_modelarts_commands(tmp_path: Path) -> None:
    """Each pod's ``pod.sh`` (LWS env, pod IP) prints what the ModelArts scripts print on
    the same addresses, process by process, but for the recorded changes."""
    name = "a3/glm5.1/1x2p1x4d"
    k8s, ma = tmp_path / "k8s", tmp_path / "ma"
    k8s.mkdir()
    ma.mkdir()
    cms = {
        o["metadata"]["name"]: o
        for o in yaml.load_all(files(name)["configmaps.yaml"], Loader=yaml.CSafeLoader)
    }
    for key, text in render_files(plan(name), "modelarts").items():
        if key.endswith(".sh"):
            (ma / key).write_text(str(text))
    r = rendering(name)
    ips = {node: f"10.0.0.{node + 2}" for node in range(6)}
    for g in r.groups:
        folder = k8s / g.name
        folder.mkdir()
        for cm in (cms[f"{g.name}-scripts"], cms["sk-bundle"]):
            for key, text in cm["data"].items():
                (folder / key).write_text(text)
        for pod in g.pods:
            leader = g.pod(pod.instance, 0).node
            env = {
                "POD_IP": ips[pod.node],
                "SERVEKIT_GROUP_INDEX": str(pod.instance),
                "LWS_WORKER_INDEX": str(pod.worker),
                "LWS_GROUP_SIZE": str(g.size),
                "LWS_LEADER_ADDRESS": ips[leader],
                "NODE_NIC": "eth0",
                "ARGS": g.name,
            }
            got = _dry(folder / "pod.sh", env).split("\n# ")
            for proc, block in zip(pod.processes, got[1:], strict=True):
                want = subprocess.run(
                    ["sh", str(ma / f"{proc.name}.sh")],
                    env={
                        "PATH": os.environ["PATH"],
                        "DRY_RUN": "1",
                        "NODE_IP": ips[pod.node],
                        "NODE_NIC": "eth0",
                        f"NODE{leader}_IP": ips[leader],
                        "BUNDLE_DIR": str(folder),
                    },
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                assert block.split("\n", 1)[1].strip() == want.strip(), proc.name


@pytest.mark.slow
def test_cli_renders_k8s_with_a_resource_name_and_kind(tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    done = servekit_inproc(
        "render",
        "a2/glm5.2/1x4p1x4d",
        "--target",
        "k8s",
        "--out",
        str(out),
        "--set",
        "k8s.accelerator=example.com/npu",
    )
    assert done.returncode == 0, done.stdout
    assert (
        "Pod Security Standards" in done.stdout and "Differences from the ModelArts" in done.stdout
    )
    text = (out / "decode.yaml").read_text()
    assert "example.com/npu: '8'" in text and "size: 4" in text
    kust = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert set(kust["resources"]) == {
        "configmaps.yaml",
        "prefill.yaml",
        "decode.yaml",
        "proxy.yaml",
    }
    done = servekit_inproc(
        "render",
        "a3/glm5.1/1x2p1x4d",
        "--target",
        "k8s",
        "--out",
        str(tmp_path / "ds"),
        "--k8s-kind",
        "disaggregatedset",
    )
    assert done.returncode == 0, done.stdout
    ds = yaml.safe_load((tmp_path / "ds" / "disaggregatedset.yaml").read_text())
    assert [r["name"] for r in ds["spec"]["roles"]] == ["prefill", "decode"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--set", "k8s.bogus=1"], "k8s.accelerator"),
        (["--set", "modelarts.x=1"], "not a setting of --target k8s"),
        (["--k8s-kind", "disaggregatedset"], "no prefill/decode"),
    ],
)
def test_cli_refuses_bad_k8s_settings(tmp_path: Path, args: list[str], words: str) -> None:
    """Refused before anything is written (the console entry turns it into exit 2)."""
    name = "a3/glm5.1/1node" if "--k8s-kind" in args else "a3/1p1d"
    done = servekit_inproc("render", name, "--target", "k8s", "--out", str(tmp_path / "o"), *args)
    assert done.returncode == 2, done.stderr
    assert words in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "o").exists()


def test_pd_layouts_render_as_one_disaggregatedset() -> None:
    for name in PD_LAYOUTS:
        kinds = [o["kind"] for o in objects(name, "disaggregatedset")]
        assert kinds.count("DisaggregatedSet") == 1 and "LeaderWorkerSet" not in kinds, name


def test_the_proxy_reaches_every_kv_event_publisher_by_its_pod_name() -> None:
    """``URL=tcp://HOST:PORT``: both sides name the engine's pod, the KV_EVENTS condition
    stays, and each pod's ports hold its publishers'."""
    name = "a3/glm5.1/1x2p1x4d"
    r = rendering(name)
    words = [a for a in r.processes["proxy"].command if "=tcp://" in _text(a)]
    assert len(words) == 2 + 16  # every prefill and decode rank
    for word in words:
        assert not isinstance(word, str) and word.when is not None
        assert word.when.var == "KV_EVENTS_ON"
        api, _, events = _text(word).removeprefix("http://").partition("=tcp://")
        assert api.split(":")[0] == events.split(":")[0] and "NODE" not in api
    # each pod's ports (its containerPorts, and its own Service's where pods get one)
    # hold its processes' publishers
    pods = [pod for g in r.groups for pod in g.pods]
    for p in plan(name).processes:
        if p.kv_events_port is not None:
            (pod,) = [pod for pod in pods if p.name in {q.name for q in pod.processes}]
            assert p.kv_events_port in pod.ports, p.name


def _text(arg: object) -> str:
    from servekit.render import Word

    if isinstance(arg, Word):
        return "".join(p if isinstance(p, str) else "${" + p.var + "}" for p in arg.parts)
    return str(arg)
