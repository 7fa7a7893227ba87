"""``--set k8s.*`` (issue 42): weights, network, host files, RDMA, resources, placement, lifecycle.

Each option is read through the one route (``servekit render ... --set k8s.KEY=VALUE``,
the platform table's settings, :mod:`servekit.platforms.k8s.settings`), refused with
one line naming it when bad, and shows in the objects. For every catalog layout the
engine and proxy pods are Guaranteed (the kubelet's QoS rule) and the Pod Security
Standards level the rendering states is the one the standard's rules give for its pods
(tests/platforms/pod_security.py, written from the standard, not from the renderer).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings, strategies as st
from tests.helpers.cli import servekit_inproc
from tests.platforms.k8s_schemas import problems
from tests.platforms.pod_security import (
    BASELINE,
    RESTRICTED,
    least,
    level,
    pod_specs,
    qos,
    violations,
)
from tests.platforms.rendered import CATALOG, EVERYTHING, LAYOUTS, files, objects

from servekit.errors import UsageError
from servekit.platforms.api import render_target
from servekit.platforms.k8s.settings import (
    NAMES,
    NODE_SHARES,
    parse_settings,
    resources_table,
    settings_table,
)
from servekit.platforms.table import PLATFORMS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md"
GPU = [
    "hardware.accelerator=nvidia",
    "hardware.devices_per_node=2",
    "engines.prefill.partial_node=true",
    "engines.decode.partial_node=true",
]
"""local/1p1d as a GPU layout: prefill and decode on one GPU each of a two-GPU node."""


def _engine_containers(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        spec["containers"][0]
        for o in objs
        if o["kind"] in ("LeaderWorkerSet", "DisaggregatedSet")
        for _, spec in pod_specs(o)
    ]


def _stated_level(text: str) -> str:
    found = re.search(r"the pods need the (\w+) level", text)
    assert found, text
    return found.group(1)


def _check_rendering(name: str, settings: tuple[tuple[str, str], ...] = ()) -> None:
    objs = objects(name, "leaderworkerset", settings)
    specs = [spec for o in objs for _, spec in pod_specs(o)]
    assert specs, name
    assert {qos(s) for s in specs} == {"Guaranteed"}, name
    stated = _stated_level(str(files(name, "leaderworkerset", settings)["k8s.md"]))
    assert stated == least([level(s) for s in specs]), name


def test_every_layout_is_guaranteed_and_states_its_pod_security_level() -> None:
    for name in LAYOUTS:
        _check_rendering(name)
    # the defaults mount the model and (Ascend) the host files from the host: privileged;
    # a claim for the model and no host files: baseline
    assert _stated_level(str(files("a3/glm5.1/1x2p1x4d")["k8s.md"])) == "privileged"
    baseline = (("model", "pvc:models"), ("host_files", "off"))
    _check_rendering("a3/glm5.1/1x2p1x4d", baseline)
    assert (
        _stated_level(str(files("a3/glm5.1/1x2p1x4d", settings=baseline)["k8s.md"])) == "baseline"
    )


@pytest.mark.slow
def test_every_layout_with_every_option_passes_the_schemas_and_states_its_level() -> None:
    refused = {}
    for name in LAYOUTS:
        if not CATALOG[name].hardware.is_ascend:
            continue
        _check_rendering(name, EVERYTHING)
        for obj in objects(name, "leaderworkerset", EVERYTHING):
            found = problems(obj)
            if found:
                refused[f"{name} {obj['kind']} {obj['metadata']['name']}"] = found[:3]
    assert not refused, refused


@pytest.mark.parametrize(
    ("setting", "value", "words"),
    [
        ("model", "s3://bucket/x", "choose host"),
        ("model", "host:relative/path", "host:/ABSOLUTE/PATH"),
        ("model", "pvc:Bad_Claim", "pvc:CLAIM"),
        ("model", "pvc:models/../etc", "pvc:CLAIM"),
        ("model", "hf:org/name@$(reboot)", "hf:ORG/NAME"),
        ("model_size", "50Gi", "is for k8s.model=hf"),
        ("memory", "lots", "Kubernetes quantity"),
        ("cpu", "0", "Kubernetes quantity"),
        ("network", "overlay", "choose one of pod, host"),
        ("host_files", "yes", "choose one of on, off"),
        ("rdma", "rdma/ib", "is for GPU layouts"),
        ("gang", "kueue", "choose one of none, volcano"),
        ("volcano_queue", "q", "with k8s.gang=volcano"),
        ("exclusive_topology", "not a key", "node label key"),
        ("tolerations", "key:Sometimes", "KEY[=VALUE][:EFFECT]"),
        ("node_selector", "novalue", "KEY=VALUE"),
        ("image_pull_secrets", "Bad Name", "Secret names"),
        ("prefix", "Upper", "DNS label"),
        ("podmonitor", "maybe", "choose one of on, off"),
    ],
)
def test_a_bad_option_is_refused_in_one_line_naming_it(
    tmp_path: Path, setting: str, value: str, words: str
) -> None:
    done = servekit_inproc(
        "render", "a3/glm5.1/1x2p1x4d", "--target", "k8s", "--out", str(tmp_path / "o"),
        "--set", f"k8s.{setting}={value}",
    )  # fmt: skip
    assert done.returncode == 2, done.stdout
    assert f"k8s.{setting}" in done.stderr and words in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "o").exists()


def test_the_settings_are_declared_once_and_documented() -> None:
    """The platform table takes its keys from the settings table; the docs hold both tables."""
    assert PLATFORMS["k8s"].settings == NAMES
    text = DOCS.read_text()
    assert settings_table() in text, "docs/kubernetes.md: paste settings_table()"
    assert resources_table() in text, "docs/kubernetes.md: paste resources_table()"


def test_resources_are_the_node_share_of_the_pods_devices() -> None:
    """A3 pods holding a whole node ask what vllm-ascend's LWS asks; half a node half of it."""
    share = NODE_SHARES["ascend-a3"]
    res = _engine_containers(objects("a3/glm5.1/1x2p1x4d"))[0]["resources"]["limits"]
    assert res["cpu"] == str(share.cpu) and res["memory"] == f"{share.memory_gi}Gi"
    assert res["ephemeral-storage"] == f"{share.ephemeral_gi}Gi"
    half = [
        c["resources"]["limits"]
        for c in _engine_containers(objects("a3/deepseekv4-flash/1node"))
        if c["resources"]["limits"].get("huawei.com/ascend-1980") == "8"
    ]
    for limits in half:
        assert limits["cpu"] == "62500m" and limits["memory"] == "256Gi"
    given = _engine_containers(objects("a3/glm5.1/1x2p1x4d", settings=EVERYTHING))[0]
    assert given["resources"]["limits"]["cpu"] == "96"
    assert given["resources"]["limits"]["memory"] == "800Gi"


def _volume(spec: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(v for v in spec["volumes"] if v["name"] == name)
    return found


def _mount(container: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(m for m in container["volumeMounts"] if m["name"] == name)
    return found


def _first_engine(objs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = next(
        spec for o in objs if o["kind"] == "LeaderWorkerSet" for _, spec in pod_specs(o)
    )
    return spec


def test_the_model_is_mounted_at_the_model_path_from_each_source() -> None:
    name = "a3/glm5.1/1x2p1x4d"
    spec = _first_engine(objects(name))
    assert _volume(spec, "model")["hostPath"] == {"path": "/root/model", "type": "Directory"}
    assert _mount(spec["containers"][0], "model") == {
        "name": "model", "mountPath": "/root/model", "readOnly": True,
    }  # fmt: skip
    spec = _first_engine(objects(name, settings=(("model", "pvc:weights/glm/5.1"),)))
    assert _volume(spec, "model")["persistentVolumeClaim"] == {
        "claimName": "weights",
        "readOnly": True,
    }
    assert _mount(spec["containers"][0], "model")["subPath"] == "glm/5.1"
    spec = _first_engine(objects(name, settings=EVERYTHING))
    fetch, preflight = spec["initContainers"]  # the preflight after: it checks the model
    assert fetch["command"][-3:] == ["zai-org/GLM-5.1", "main", "/root/model"]
    assert preflight["name"] == "preflight" and preflight["command"][-1] == "preflight"
    assert {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}},
    } in fetch["env"]
    assert _volume(spec, "model")["persistentVolumeClaim"] == {"claimName": "models"}
    assert _mount(fetch, "model") == {"name": "model", "mountPath": "/root/model", "subPath": "glm"}
    assert _mount(spec["containers"][0], "model")["readOnly"] is True
    # a relative model path (local layouts) is mounted under the working folder
    spec = _first_engine(objects("local/1p1d"))
    assert spec["containers"][0]["workingDir"] == "/workspace"
    assert _mount(spec["containers"][0], "model")["mountPath"] == "/workspace/.servekit/models/tiny"
    text = str(files(name)["k8s.md"])
    assert "model (default (host)): the node's folder /root/model (hostPath)" in text


def test_the_pod_network_is_the_default_and_the_host_network_an_option() -> None:
    name = "a2/glm5.2/1x4p1x4d"
    for o in objects(name):
        for _, spec in pod_specs(o):
            assert "hostNetwork" not in spec and "dnsPolicy" not in spec
    host = [
        spec for o in objects(name, settings=(("network", "host"),)) for _, spec in pod_specs(o)
    ]
    engines = [s for s in host if s["containers"][0]["name"] == "engine"]
    assert engines and all(
        s["hostNetwork"] and s["dnsPolicy"] == "ClusterFirstWithHostNet" for s in engines
    )
    assert not any(s.get("hostNetwork") for s in host if s["containers"][0]["name"] == "proxy")


def test_ascend_pods_mount_the_host_files_by_default_and_gpu_ones_get_rdma() -> None:
    spec = _first_engine(objects("a3/glm5.1/1x2p1x4d"))
    paths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert {"/etc/hccn.conf", "/usr/local/Ascend/driver/tools"} <= paths
    _, rendered = render_target("local/1p1d", "k8s", GPU)
    objs = [
        o
        for name, text in rendered.items()
        if name.endswith(".yaml") and name != "kustomization.yaml"
        for o in yaml.safe_load_all(str(text))
        if o
    ]
    for o in objs:
        assert not problems(o), (o["kind"], problems(o)[:2])
    containers = _engine_containers(objs)
    assert len(containers) == 2
    for c in containers:
        assert c["resources"]["limits"]["rdma/ib"] == "1" == c["resources"]["requests"]["rdma/ib"]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert c["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    specs = [spec for o in objs for _, spec in pod_specs(o)]
    assert least([level(s) for s in specs]) == "privileged"
    assert "capability IPC_LOCK" in str(rendered["k8s.md"])
    _, plain = render_target("local/1p1d", "k8s", [*GPU, "k8s.rdma=none", "k8s.model=pvc:m"])
    assert "rdma/ib" not in str(plain["prefill.yaml"]) and "the baseline level" in str(
        plain["k8s.md"]
    )


def test_placement_options_reach_the_lws_and_its_pods() -> None:
    objs = objects("a3/glm5.1/1x2p1x4d", settings=EVERYTHING)
    lws = [o for o in objs if o["kind"] == "LeaderWorkerSet"]
    for o in lws:
        assert o["metadata"]["annotations"] == {
            "leaderworkerset.sigs.k8s.io/exclusive-topology": "kubernetes.io/hostname",
            "scheduling.volcano.sh/queue-name": "serving",
        }
        for _, spec in pod_specs(o):
            assert spec["schedulerName"] == "volcano"
            assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "a3"}
            assert spec["tolerations"][0] == {
                "key": "huawei.com/ascend-1980", "operator": "Exists", "effect": "NoSchedule",
            }  # fmt: skip
            assert spec["imagePullSecrets"] == [{"name": "registry"}]
    text = str(files("a3/glm5.1/1x2p1x4d", settings=EVERYTHING)["k8s.md"])
    assert "LWS makes PodGroup sk-decode-0-<revision>: minMember 4" in text


def test_the_podgroups_lws_makes_pass_volcanos_schema() -> None:
    from servekit.platforms.k8s.build import decide, manifests
    from servekit.platforms.k8s.settings import parse_settings
    from servekit.render import build_plan, bundle_files

    layout = CATALOG["a3/glm5.1/1x2p1x4d"]
    r = decide(build_plan(layout), layout, parse_settings(dict(EVERYTHING), layout))
    groups = manifests(r, bundle_files()).podgroups
    assert [g["spec"]["minMember"] for g in groups] == [2, 4]
    decode = groups[1]["spec"]["minResources"]
    assert decode["huawei.com/ascend-1980"] == "64" and decode["cpu"] == "384"
    for pg in groups:
        assert not problems(pg)
        bad = copy.deepcopy(pg)
        bad["spec"]["minMember"] = "four"
        assert problems(bad)


def test_every_port_is_declared_named_and_probed() -> None:
    """Every port a pod's processes bind is a named containerPort; each API port is probed."""
    from tests.platforms.rendered import rendering

    for name in ("a3/glm5.1/1x2p1x4d", "a2/glm5.2/1x4p1x4d", "a3/deepseekv4-flash/2p2d"):
        objs = {o["metadata"]["name"]: o for o in objects(name) if o["kind"] == "LeaderWorkerSet"}
        for g in rendering(name).groups:
            tmpl = objs[g.name]["spec"]["leaderWorkerTemplate"]
            for pod in g.pods:
                key = (
                    "leaderTemplate"
                    if pod.worker == 0 and "leaderTemplate" in tmpl
                    else "workerTemplate"
                )
                c = tmpl[key]["spec"]["containers"][0]
                declared = {p["containerPort"]: p["name"] for p in c["ports"]}
                assert set(pod.ports) <= set(declared), (name, pod.name)
                assert len(set(declared.values())) == len(declared)
                assert all(len(n) <= 15 for n in declared.values())
                for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                    action = c[probe]
                    text = str(action.get("httpGet", {}).get("port", "")) + str(
                        action.get("exec", "")
                    )
                    assert all(str(port) in text for port in pod.api_ports), (name, probe)


@pytest.mark.slow
def test_pod_templates_carry_the_scripts_hash() -> None:
    """A changed script changes its group's template (LWS rolls the group), not the others'."""

    def hashes(settings: tuple[tuple[str, str], ...], sets: list[str]) -> dict[str, str]:
        _, rendered = render_target("a3/glm5.1/1x2p1x4d", "k8s", sets)
        out = {}
        for key in ("prefill.yaml", "decode.yaml", "proxy.yaml"):
            for o in yaml.safe_load_all(str(rendered[key])):
                for where, spec in pod_specs(o):
                    del spec
                    tmpl = (
                        o["spec"].get("template")
                        or o["spec"]["leaderWorkerTemplate"]["workerTemplate"]
                    )
                    out[where] = tmpl["metadata"]["annotations"]["servekit.io/config-hash"]
        return out

    before = hashes((), [])
    after = hashes((), ["engines.decode0.settings.max_num_seqs=4"])
    changed = {k for k in before if before[k] != after[k]}
    assert changed and all(k.startswith("sk-decode") for k in changed), changed


def test_pod_security_controls_refuse_what_they_name() -> None:
    """Positive controls of the test-side standard: each control flags its own violation."""
    base = _first_engine(
        objects("a3/glm5.1/1x2p1x4d", settings=(("model", "pvc:m"), ("host_files", "off")))
    )
    assert level(base) == "baseline" and not violations(base, BASELINE)
    spoilers = {
        "host namespaces": lambda s: s.update(hostNetwork=True),
        "privileged containers": lambda s: s["containers"][0].update(
            securityContext={"privileged": True}
        ),
        "capabilities": lambda s: s["containers"][0].update(
            securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}
        ),
        "hostPath volumes": lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
        "host ports": lambda s: s["containers"][0]["ports"][0].update(hostPort=80),
        "seccomp": lambda s: s.update(securityContext={"seccompProfile": {"type": "Unconfined"}}),
        "sysctls": lambda s: s.update(
            securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}
        ),
    }
    for control, spoil in spoilers.items():
        spec = copy.deepcopy(base)
        spoil(spec)
        assert control in violations(spec, BASELINE), control
        assert level(spec) == "privileged"
    assert "running as non-root" in violations(base, RESTRICTED)
    assert (
        qos({"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]}) == "Burstable"
    )
    assert qos({"containers": [{"name": "c"}]}) == "BestEffort"


def test_an_unknown_k8s_setting_lists_the_settings() -> None:
    with pytest.raises(UsageError, match=r"its settings: k8s\.accelerator"):
        render_target("a3/glm5.1/1x2p1x4d", "k8s", ["k8s.bogus=1"])


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(NAMES), st.text(max_size=300))
def test_any_option_value_parses_or_is_refused_in_one_line(name: str, value: str) -> None:
    """Hostile values: a value is taken or refused with one line naming its option, nothing
    else (no crash, no value reaching a manifest unchecked)."""
    layout = CATALOG["a3/glm5.1/1x2p1x4d"]
    try:
        parse_settings({name: value}, layout)
    except UsageError as exc:
        assert f"k8s.{name}" in str(exc) and "\n" not in str(exc)
