"""``k8s.elastic=on`` (issue 41): any LeaderWorkerSet group index runs, the proxy
discovers the pods, a leaving pod is drained first, autoscalers pass their CRD schemas.

Each pod runs the rendered ``pod.sh`` under bash with ``DRY_RUN=1`` (the pod's
commands printed, nothing started), from the ConfigMaps as the kubelet mounts them.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import example, given, settings, strategies as st
from tests.platforms.k8s_schemas import problems
from tests.platforms.rendered import CATALOG, PD_LAYOUTS, files

from servekit.errors import UsageError
from servekit.platforms.k8s import elastic
from servekit.platforms.k8s.build import decide, summary
from servekit.platforms.k8s.settings import parse_settings
from servekit.proxy import spec_from_doc
from servekit.proxy.config import parse_args
from servekit.render import build_plan

ELASTIC = (("elastic", "on"), ("autoscale", "keda"))
PD = "a3/deepseekv4-flash/2p2d"
WIDE = "a3/glm5.1/1x2p1x4d"  # instances of several pods (LWS workers)
BOOTSTRAP = "local/1p1d-mooncake"  # vLLM's MooncakeConnector: the proxy names engine ids


def _objects(name: str, settings: tuple[tuple[str, str], ...] = ELASTIC) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path, text in files(name, "leaderworkerset", settings).items():
        if path.endswith(".yaml") and path != "kustomization.yaml":
            assert isinstance(text, str)
            out += [o for o in yaml.load_all(text, Loader=yaml.CSafeLoader) if o]
    return out


def _mount(objs: list[dict[str, Any]], prefixes: tuple[str, ...], folder: Path) -> None:
    """The ConfigMaps a pod mounts, as the kubelet writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    for o in objs:
        if o["kind"] != "ConfigMap" or not o["metadata"]["name"].startswith(prefixes):
            continue
        for key, value in (o.get("data") or {}).items():
            (folder / key).write_text(value)
        for key, value in (o.get("binaryData") or {}).items():
            (folder / key).write_bytes(base64.b64decode(value))


def pod_uid(index: int, worker: int = 0) -> str:
    """A pod uid of the API server's shape, one per (index, worker)."""
    return f"{index:08x}-0000-4000-8000-{worker:012x}"


def _dry(folder: Path, run: Path, group: str, index: int, worker: int = 0) -> subprocess.Popen[str]:
    env = {
        "PATH": os.environ["PATH"],
        "POD_IP": "10.0.0.9",
        elastic.POD_UID_VAR: pod_uid(index, worker),
        "SERVEKIT_GROUP_INDEX": str(index),
        "LWS_WORKER_INDEX": str(worker),
        "LWS_LEADER_ADDRESS": "127.0.0.1",
        "SERVEKIT_RUN_DIR": str(run),
        "NODE_NIC": "eth0",
        "DRY_RUN": "1",
    }
    return subprocess.Popen(
        ["bash", str(folder / "pod.sh"), group], env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def _commands(out: str) -> list[str]:
    """The printed commands, the pod's own report lines left out."""
    return [line for line in out.splitlines() if not line.startswith(("[servekit]", "# "))]


@pytest.mark.slow
def test_elastic_layouts_pass_the_schemas_bootstrap_ones_included() -> None:
    """Every PD layout with a proxy renders elastic with KEDA, the bootstrap-mode one
    included; its objects, the ScaledObjects (KEDA v2.20.2's CRD), Role and
    ServiceAccount included, pass."""
    refused, taken, kinds = {}, [], set()
    for name in PD_LAYOUTS:
        try:
            files(name, "leaderworkerset", ELASTIC)
        except UsageError as exc:  # only autoscaling's: a role of several LeaderWorkerSets
            assert exc.message.startswith("k8s.autoscale: role"), (name, exc.message)
            continue
        taken.append(name)
        for obj in _objects(name):
            kinds.add(obj["kind"])
            found = problems(obj)
            if found:
                refused[f"{name} {obj['kind']} {obj['metadata']['name']}"] = found[:3]
    assert not refused, refused
    assert PD in taken and WIDE in taken and BOOTSTRAP in taken
    assert {"ScaledObject", "ServiceAccount", "Role", "RoleBinding", "PodMonitor"} <= kinds


def test_hpa_passes_and_a_bad_field_is_refused() -> None:
    hpas = [o for o in _objects(PD, (("elastic", "on"), ("autoscale", "hpa")))
            if o["kind"] == "HorizontalPodAutoscaler"]  # fmt: skip
    assert len(hpas) == 2
    for hpa in hpas:
        assert problems(hpa) == []
        assert hpa["spec"]["minReplicas"] == 1
        assert hpa["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"
    bad = json.loads(json.dumps(hpas[0]))
    bad["spec"]["minReplicas"] = "one"
    assert any(at.startswith("spec.minReplicas") for at, _ in problems(bad))
    scaled = next(o for o in _objects(PD) if o["kind"] == "ScaledObject")
    bad = json.loads(json.dumps(scaled))
    bad["spec"]["triggers"][0]["typo"] = 1
    assert problems(bad), "the KEDA schema took an unknown field"


def test_scaled_objects_aim_at_the_proxys_desired_count_per_role() -> None:
    scaled = {o["metadata"]["name"]: o for o in _objects(PD) if o["kind"] == "ScaledObject"}
    assert set(scaled) == {"sk-prefill", "sk-decode"}
    for name, obj in scaled.items():
        spec = obj["spec"]
        role = name.removeprefix("sk-")
        assert spec["scaleTargetRef"] == {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "name": name,
        }
        assert spec["minReplicaCount"] == 1
        trigger = spec["triggers"][0]
        assert trigger["metricType"] == "AverageValue" and trigger["metadata"]["threshold"] == "1"
        assert f'servekit_desired_replicas{{role="{role}"' in trigger["metadata"]["query"]
        behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        assert behavior["scaleDown"]["policies"] == [
            {"type": "Pods", "value": 1, "periodSeconds": 60}
        ]


def test_engine_pods_drain_before_they_stop() -> None:
    objs = _objects(PD, (("elastic", "on"), ("drain_grace", "45"), ("drain_wait", "100")))
    for lws in (o for o in objs if o["kind"] == "LeaderWorkerSet"):
        pod = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
        container = pod["containers"][0]
        hook = container["lifecycle"]["preStop"]["exec"]["command"]
        assert hook == ["/bin/bash", "/servekit/pod.sh", lws["metadata"]["name"], "prestop"]
        assert pod["terminationGracePeriodSeconds"] > 45 + 100
        rollout = lws["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]
        assert rollout == {"maxSurge": 1, "maxUnavailable": 0}
        names = {e["name"] for e in container["env"]}
        assert {"POD_NAME", elastic.ADMIN_KEY_ENV} <= names
    deployment = next(o for o in objs if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "sk-proxy"
    role = next(o for o in objs if o["kind"] == "Role")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                              "verbs": ["get", "list", "watch"]}]  # fmt: skip
    peers = next(o for o in objs if o["metadata"]["name"] == "sk-proxy-peers")
    assert peers["spec"]["clusterIP"] == "None"


def test_the_proxy_discovers_instead_of_a_list(tmp_path: Path) -> None:
    """The rendered proxy command parses with the proxy's own parser, names no engine,
    and its spec (in its ConfigMap) has every group's labels and ports."""
    objs = _objects(PD)
    _mount(objs, ("sk-proxy-scripts",), tmp_path)
    spec = json.loads((tmp_path / elastic.SPEC_FILE).read_text())
    groups = {r["selector"]["servekit.io/group"]: r for r in spec["roles"]}
    assert set(groups) == {"sk-prefill", "sk-decode"}
    assert [len(w["endpoints"]) for w in groups["sk-decode"]["workers"]] == [16]
    env = {"PATH": os.environ["PATH"], "POD_IP": "10.0.0.2", "DRY_RUN": "1",
           "BUNDLE_DIR": str(tmp_path)}  # fmt: skip
    out = subprocess.run(["sh", str(tmp_path / "proxy.sh")], env=env, text=True,
                         capture_output=True, check=True).stdout.split("\n")  # fmt: skip
    argv = [w for w in out if w][2:]
    assert "--prefill" not in argv and "--decode" not in argv
    os.environ.setdefault(elastic.ADMIN_KEY_ENV, "test")
    config = parse_args(argv, read_keys=False)
    r = decide(build_plan(CATALOG[PD]), CATALOG[PD], parse_settings(dict(ELASTIC), CATALOG[PD]))
    reasons = [c.reason for c in r.changes if c.process == "proxy"]
    assert reasons.count("elastic") == 1 and "backend" not in reasons, reasons
    assert config.discovery == "kubernetes" and config.autoscale and config.admin
    assert config.discovery_spec == str(tmp_path / elastic.SPEC_FILE)
    assert config.pool_wait_s == 60  # k8s.pool_wait's default: a replaced pod is waited for


@pytest.mark.slow
@pytest.mark.parametrize("name", [PD, WIDE, BOOTSTRAP])
def test_any_group_index_runs_its_first_instances_processes(name: str, tmp_path: Path) -> None:
    """Index 0, the last rendered and three beyond: the same commands as instance 0's
    but for the engine id, ids unique over every group and index."""
    objs = _objects(name)
    r = decide(build_plan(CATALOG[name]), CATALOG[name],
               parse_settings(dict(ELASTIC), CATALOG[name]))  # fmt: skip
    rules = elastic.id_rules(r.plan, r.groups)
    ids: dict[str, tuple[str, int]] = {}
    for g in r.groups:
        folder = tmp_path / g.name
        _mount(objs, (f"{g.name}-scripts", "sk-bundle"), folder)
        indexes = sorted({0, g.replicas - 1, g.replicas, g.replicas + 1, g.replicas + 40})
        runs = {(i, w): _dry(folder, tmp_path / f"run-{g.name}-{i}-{w}", g.name, i, w)
                for i in indexes for w in range(g.size)}  # fmt: skip
        outs = {k: p.communicate(timeout=60) for k, p in runs.items()}
        for (i, w), (out, err) in outs.items():
            assert runs[(i, w)].returncode == 0, err
            first = _commands(outs[(0, w)][0].replace(f"run-{g.name}-0-{w}", "RUN"))
            mine = _commands(out.replace(f"run-{g.name}-{i}-{w}", "RUN"))
            engine_ids = {p.engine_id for p in g.pod(min(i, g.replicas - 1), w).processes}
            own = rules[g.name].engine_id(i) if i >= g.replicas else next(iter(engine_ids))
            if g.name in elastic.incarnation_groups(r):  # the pod's own incarnation
                own = f"{own}-{pod_uid(i, w)}"
            first_id = g.pod(0, w).processes[0].engine_id
            if first_id is not None:
                if g.name in elastic.incarnation_groups(r):
                    first_id = f"{first_id}-{pod_uid(0, w)}"
                swapped = [c.replace(f'"engine_id":"{first_id}"', f'"engine_id":"{own}"')
                           for c in first]  # fmt: skip
                assert mine == swapped or i < g.replicas, (g.name, i, w)
                assert f'"engine_id":"{own}"' in out
                seen = ids.setdefault(own, (g.name, i))
                assert seen == (g.name, i), f"engine id {own} twice: {seen} and {(g.name, i)}"
            elif i >= g.replicas:
                assert mine == first, (g.name, i, w)  # no engine id: the very same commands
            if i >= g.replicas:
                assert "beyond the" in out
    with_ids = [g for g in r.groups if g.pod(0, 0).processes[0].engine_id is not None]
    assert len(ids) >= 4 * len(with_ids)


@pytest.mark.slow
def test_a_hostile_group_index_is_refused(tmp_path: Path) -> None:
    objs = _objects(PD)
    _mount(objs, ("sk-decode-scripts", "sk-bundle"), tmp_path)
    canary = tmp_path / "canary"
    for bad in ("1;touch " + str(canary), "$(id)", "-1", "12345678", "1 2", "00", "010", "²"):
        env = {"PATH": os.environ["PATH"], "POD_IP": "10.0.0.9", "SERVEKIT_GROUP_INDEX": bad,
               "SERVEKIT_RUN_DIR": str(tmp_path / "run"), "DRY_RUN": "1",
               "NODE_NIC": "eth0"}  # fmt: skip
        done = subprocess.run(["bash", str(tmp_path / "pod.sh"), "sk-decode"], env=env,
                              text=True, capture_output=True, timeout=60, check=False)  # fmt: skip
        assert done.returncode == 2, (bad, done.stderr)
        assert "is not a group index" in done.stderr
    assert not canary.exists()


def test_id_rule_is_unique_across_groups_and_indexes() -> None:
    r = decide(build_plan(CATALOG[PD]), CATALOG[PD], parse_settings(dict(ELASTIC), CATALOG[PD]))
    rules = elastic.id_rules(r.plan, r.groups)
    rendered = {p.engine_id for p in r.plan.processes if p.engine_id is not None}
    derived = [rules[g.name].engine_id(i) for g in r.groups for i in range(g.replicas, 500)]
    assert len(set(derived)) == len(derived)
    assert not rendered & set(derived)
    for g in r.groups:  # the rendered instances keep the ids the layout gives them
        assert [rules[g.name].engine_id(i) for i in range(g.replicas)] == [
            g.pod(i, 0).processes[0].engine_id for i in range(g.replicas)
        ]


def _rendering(name: str) -> Any:
    return decide(build_plan(CATALOG[name]), CATALOG[name],
                  parse_settings(dict(ELASTIC), CATALOG[name]))  # fmt: skip


def test_the_bootstrap_spec_names_each_prefill_by_the_rule_its_pods_follow(tmp_path: Path) -> None:
    """The spec in the proxy's ConfigMap: each prefill API server's bootstrap port (the
    Plan's, what its pod exports as VLLM_MOONCAKE_BOOTSTRAP_PORT), the very rule that
    numbers its pods and the pod uid that follows it (the pod gets it from the downward
    API, its script reads the id pod.sh makes); the proxy's command names no prefill (and
    no --prefill-bootstrap)."""
    r = _rendering(BOOTSTRAP)
    objs = _objects(BOOTSTRAP)
    _mount(objs, ("sk-proxy-scripts",), tmp_path)
    doc = json.loads((tmp_path / elastic.SPEC_FILE).read_text())
    spec = spec_from_doc(doc)
    prefill = next(role for role in spec.roles if role.role == "prefill")
    decode = next(role for role in spec.roles if role.role == "decode")
    rules = elastic.id_rules(r.plan, r.groups)
    assert prefill.engine_id_from == "id_rule" and prefill.engine_ids == rules["sk-prefill"]
    assert decode.bootstrap_port is None and decode.engine_ids is None
    wiring = r.proxy.proxy
    assert [b.engine_id for b in wiring.bootstrap] == list(prefill.engine_ids.ids)
    port = prefill.workers[0].endpoints[0].bootstrap_port
    assert prefill.bootstrap_port is None and port == wiring.bootstrap[0].server.port
    assert r.processes["prefill"].env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == str(port)
    assert prefill.engine_id_pod_uid and not decode.engine_id_pod_uid
    assert prefill.workers[0].endpoints[0].dp_rank is None  # DP 1: vLLM adds no suffix
    pods = {o["metadata"]["name"]: o for o in objs if o["kind"] == "LeaderWorkerSet"}
    env = pods["sk-prefill"]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"][
        "containers"][0]["env"]  # fmt: skip
    assert {"name": elastic.POD_UID_VAR,
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}} in env  # fmt: skip
    assert any(c.reason == "incarnation" and c.process == "prefill" for c in r.changes)
    argv = [elastic._text(a) for a in r.processes["proxy"].command]
    assert argv[argv.index("--mode") + 1] == "bootstrap"
    assert "--prefill" not in argv and "--prefill-bootstrap" not in argv, argv


def test_a_bootstrap_layout_whose_spec_the_proxy_would_refuse_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r = _rendering(BOOTSTRAP)
    real = elastic.id_rules

    def clashing(plan: Any, groups: Any) -> dict[str, Any]:  # a rendered id the rule derives
        rules = real(plan, groups)
        rule = rules["sk-prefill"]
        rules["sk-prefill"] = type(rule)(rule.rendered, 0, rule.step, 0, rule.ids)
        return rules

    monkeypatch.setattr(elastic, "id_rules", clashing)
    with pytest.raises(UsageError, match="would be refused by the proxy") as caught:
        elastic.discovery_spec(r)
    assert "\n" not in caught.value.message


def test_a_bootstrap_prefill_spanning_pods_names_each_ranks_own_server_and_id() -> None:
    """External-DP ranks over two pods: each rank's API server has its own bootstrap
    server on its own pod (the static proxy names each), and the spec names each by its
    port and DP rank (vLLM's ``<id>_dp<rank>``), on the pod that serves it."""
    layout = CATALOG[BOOTSTRAP]
    doc = layout.model_dump(mode="json", exclude_none=True)
    doc["nodes"] = 2
    doc["engines"][0].update({"nodes": [0, 1], "dp_size": 2, "launch": "external-dp"})
    doc["proxy"]["prefill"] = [{"node": 0, "ports": 8100}, {"node": 1, "ports": 8100}]
    wide = type(layout).model_validate(doc)
    r = decide(build_plan(wide), wide, parse_settings({"elastic": "on"}, wide))
    assert [(b.engine_id, b.server.port) for b in r.proxy.proxy.bootstrap] == [
        ("0_dp0", 8998), ("0_dp1", 8999)]  # fmt: skip
    prefill = next(role for role in elastic.discovery_spec(r).roles if role.role == "prefill")
    assert [(w.worker_index, e.dp_rank, e.bootstrap_port) for w in prefill.workers
            for e in w.endpoints] == [(0, 0, 8998), (1, 1, 8999)]  # fmt: skip


def test_a_static_bootstrap_rendering_states_its_fixed_ids_limit() -> None:
    """Without k8s.elastic the proxy names fixed ids, which a recreated prefill pod
    reuses: the render summary says so and names the remedy; elastic renderings do not
    have the limit and do not say it."""
    layout = CATALOG[BOOTSTRAP]
    static = summary(decide(build_plan(layout), layout, parse_settings({}, layout)))
    assert "bootstrap mode: the prefills' engine ids are fixed (0)" in static
    assert "render with k8s.elastic=on" in static
    assert "engine ids are fixed" not in summary(_rendering(BOOTSTRAP))
    assert "engine ids are fixed" not in summary(_rendering(PD))


@pytest.fixture(scope="module")
def bootstrap_prefill(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bootstrap layout's prefill pod's mounts, as the kubelet writes them."""
    folder = tmp_path_factory.mktemp("bootstrap-prefill")
    _mount(_objects(BOOTSTRAP), ("sk-prefill-scripts", "sk-bundle"), folder)
    return folder


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(index=st.integers(1, 999_999))
@example(index=1)
@example(index=999_999)
def test_pod_sh_numbers_any_index_as_the_spec_names_it(bootstrap_prefill: Path, index: int) -> None:
    """pod.sh's shell arithmetic and the spec's IdRule (what the proxy names), over the
    group indexes pod.sh takes: the same engine id."""
    rule = elastic.id_rules(*_plan_groups(BOOTSTRAP))["sk-prefill"]
    run = bootstrap_prefill / f"run-{index}"
    out, err = _dry(bootstrap_prefill, run, "sk-prefill", index).communicate(timeout=60)
    own = f"{rule.engine_id(index)}-{pod_uid(index)}"  # what discovery names that pod
    assert f'"engine_id":"{own}"' in out, err
    assert f"engine id {own} (derived" in out


@pytest.mark.slow
def test_pod_sh_refuses_a_pod_uid_it_cannot_name_an_engine_by(bootstrap_prefill: Path) -> None:
    """A per-incarnation pod without a uid of the API server's shape exits 2 before
    anything starts (a hostile value is never run or put into the id)."""
    canary = bootstrap_prefill / "canary"
    for bad in ("", "$(touch " + str(canary) + ")", "AB-CD", "-1", "a" * 65, "a\nb", "a b"):
        env = {"PATH": os.environ["PATH"], "POD_IP": "10.0.0.9", "SERVEKIT_GROUP_INDEX": "0",
               "SERVEKIT_RUN_DIR": str(bootstrap_prefill / "run-bad"), "DRY_RUN": "1",
               elastic.POD_UID_VAR: bad}  # fmt: skip
        done = subprocess.run(["bash", str(bootstrap_prefill / "pod.sh"), "sk-prefill"],
                              env=env, text=True, capture_output=True, timeout=60,
                              check=False)  # fmt: skip
        assert done.returncode == 2, (bad, done.stderr)
        assert "not a pod uid" in done.stderr or "longer than a pod uid" in done.stderr, bad
    assert not canary.exists()


@functools.cache
def _plan_groups(name: str) -> tuple[Any, Any]:
    r = _rendering(name)
    return r.plan, r.groups


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"autoscale": "keda"}, "k8s.autoscale"),
        ({"drain_grace": "5"}, "k8s.drain_grace"),
        ({"elastic": "on", "max_replicas": "0"}, "k8s.max_replicas"),
        ({"elastic": "on", "autoscale": "yes"}, "k8s.autoscale"),
        ({"elastic": "on", "prometheus": "http://p:9090"}, "k8s.prometheus"),
        ({"elastic": "on", "drain_grace": "1e3"}, "k8s.drain_grace"),
        ({"elastic": "on", "admin_secret": "Bad_Name"}, "k8s.admin_secret"),
    ],
)
def test_bad_elastic_options_are_refused_naming_the_option(
    settings: dict[str, str], named: str
) -> None:
    with pytest.raises(UsageError, match=named.replace(".", r"\.")):
        parse_settings(settings, CATALOG[PD])


def test_a_disaggregatedset_role_scales_through_its_role_scaler() -> None:
    """LWS v0.10: each role ``scaling.mode: External``, its replicas unset, and the
    ScaledObject on the DisaggregatedSetRoleScaler ``<set>-<role>`` the controller makes;
    the set passes v0.10's CRD schema (v0.9's has no ``scaling``: it needs v0.10)."""
    from tests.platforms.k8s_schemas import crd_validator

    objs = []
    for path, text in files(PD, "disaggregatedset", ELASTIC).items():
        if path.endswith(".yaml") and path != "kustomization.yaml":
            assert isinstance(text, str)
            objs += [o for o in yaml.load_all(text, Loader=yaml.CSafeLoader) if o]
    ds = next(o for o in objs if o["kind"] == "DisaggregatedSet")
    for role in ds["spec"]["roles"]:
        assert role["scaling"] == {"mode": "External"} and "replicas" not in role["spec"]
    assert list(crd_validator("disaggregatedset-v0.10.schema.json").iter_errors(ds)) == []
    assert list(crd_validator("disaggregatedset-v1.schema.json").iter_errors(ds)), "v0.9 took it"
    targets = {o["spec"]["scaleTargetRef"]["name"]: o for o in objs if o["kind"] == "ScaledObject"}
    assert set(targets) == {"sk-prefill", "sk-decode"}
    for obj in targets.values():
        assert obj["spec"]["scaleTargetRef"]["kind"] == "DisaggregatedSetRoleScaler"
        assert problems(obj) == []
    scaler = {"apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSetRoleScaler",
              "metadata": {"name": "sk-decode"}, "spec": {"replicas": 2}}  # fmt: skip
    assert (
        list(crd_validator("disaggregatedsetrolescaler-v0.10.schema.json").iter_errors(scaler))
        == []
    )


def test_a_layout_without_a_proxy_is_refused_in_one_line() -> None:
    name = "a3/dsv41-tp8"
    with pytest.raises(UsageError, match="no proxy") as caught:
        files(name, "leaderworkerset", ELASTIC)
    assert "\n" not in str(caught.value)


class _Lws:
    """What the emulated HPA scales: a count."""

    def __init__(self, n: int) -> None:
        self.n = n

    def replicas(self, lws: str) -> int:
        return self.n

    def scale(self, lws: str, n: int) -> None:
        self.n = n


def test_the_emulated_hpa_follows_the_rendered_behavior() -> None:
    """Up: the lowest need of the up window, at most doubling per period; down: the
    highest of the down window, one per period; never below minReplicaCount 1."""
    from servekit.platforms.k8s.fakelws import Autoscaler, scale_targets

    objs = _objects(PD, (*ELASTIC, ("scale_timing", "1,2,4,6,3")))
    target = next(t for t in scale_targets(objs) if t.role == "decode")
    assert (target.min_replicas, target.max_replicas) == (1, 16)
    lws = _Lws(1)
    hpa = Autoscaler(lws, [target], {})  # type: ignore[arg-type]
    assert hpa.step(target, 9.0, 0.0) == 2  # doubling at most: 1 -> 2 in this period
    assert hpa.step(target, 9.0, 2.5) == 2  # the period's doubling is spent
    assert hpa.step(target, 9.0, 7.0) == 4  # the next period: 2 -> 4
    assert hpa.step(target, 0.0, 8.0) == 4  # down takes the highest need of the 6 s window
    assert hpa.step(target, 0.0, 12.5) == 4  # t=7.0's 9 is still in it
    assert hpa.step(target, 0.0, 13.5) == 3  # then one instance per 3 s period
    assert hpa.step(target, 0.0, 14.0) == 3
    assert hpa.step(target, 0.0, 16.6) == 2
    assert hpa.step(target, 0.0, 19.7) == 1
    assert hpa.step(target, 0.0, 30.0) == 1  # never below minReplicaCount 1
    assert lws.n == 1


@settings(max_examples=150, deadline=None)
@given(
    key=st.sampled_from(["drain_grace", "drain_wait", "pool_wait", "admin_secret", "autoscale",
                         "max_replicas", "prometheus", "scale_timing", "slo"]),
    value=st.text(max_size=40),
)  # fmt: skip
def test_any_elastic_option_text_parses_or_is_refused_in_one_line(key: str, value: str) -> None:
    extra = {"autoscale": "keda"} if key in ("scale_timing", "slo", "prometheus") else {}
    try:
        parse_settings({"elastic": "on", **extra, key: value}, CATALOG[PD])
    except UsageError as e:
        assert f"k8s.{key}" in str(e) and "\n" not in str(e)
