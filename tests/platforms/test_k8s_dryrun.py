"""The Kubernetes rendering proven the way it runs: a fake cluster started from the manifests.

Each pod of the rendered LeaderWorkerSets and the proxy's Deployment runs as
processes on its own loopback address with the environment LWS and the kubelet
inject, Service and pod names resolving to the pods, its volumes made as the kubelet
makes them (the model from the node's folder by default, on the pod network)
(:mod:`servekit.platforms.k8s.fake`), ``servekit sim serve`` as ``vllm``. Then
``servekit verify NAME --target URL --pods POD=IP,...`` must pass, the engines
reached at their pods' addresses, and teardown leaves nothing. One case first re-renders
with a changed decode script: the decode group is recreated (its template's hash
changed), the prefill group and the proxy keep running, and verify passes on the
rolled cluster. The model's download by the init container (a token from a Secret)
and a node without the model are the other two.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tests.helpers.cli import own_homes

from servekit.errors import UsageError
from servekit.platforms import k8s_dry_cluster, leftovers
from servekit.platforms.k8s.fake import K8sDryCluster, PodFailed
from servekit.verify.adapters import real_components
from servekit.verify.options import VerifyOptions
from servekit.verify.run import verify

LAYOUTS = {"a3/glm5.1/1x2p1x4d": 6, "a2/glm5.2/1x4p1x4d": 8}
ROLL = ["engines.decode0.settings.gpu_memory_utilization=0.9"]  # the catalog's: 0.92
ROLLED = "--gpu-memory-utilization 0.9 "
CASES = [
    ("a3/glm5.1/1x2p1x4d", "leaderworkerset"),  # with a rollout of the decode group first
    ("a2/glm5.2/1x4p1x4d", "leaderworkerset"),
    # the child LeaderWorkerSets named with a revision, as the controller does: the
    # proxy finds the pods through their own headless Services
    ("a3/glm5.1/1x2p1x4d", "disaggregatedset"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "kind"), CASES)
def test_the_fake_cluster_passes_verify_with_pods(
    name: str, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in own_homes(tmp_path).items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "out"
    started = time.perf_counter()
    with k8s_dry_cluster(name, speed=10.0, kind=kind) as cluster:
        engine_pods = cluster.pods_arg.split(",")
        assert len(engine_pods) == LAYOUTS[name]
        if name == CASES[0][0] and kind == CASES[0][1]:
            _roll_the_decode_group(cluster)
        opts = VerifyOptions(
            name=name,
            target=cluster.entry_url,
            pods=cluster.pods_arg,
            logs=cluster.logs,
            reference=cluster.reference_url,
            out=out,
            no_baseline=True,
            quick=True,
        )
        outcome = verify(opts, real_components())
        ready_s = cluster.started_s
    took = time.perf_counter() - started
    failed = [s for s in outcome.run.steps if s.status != "ok"]
    result = out / "accept" / "result.json"
    checks_failed = (
        [c for c in json.loads(result.read_text())["checks"] if c["verdict"] == "fail"]
        if result.exists()
        else []
    )
    assert outcome.exit_code == 0, (failed, checks_failed)
    # every engine pod's initContainer ran the preflight; verify read its report (--logs)
    preflight = (outcome.run.observed or {})["preflight"]
    assert preflight.startswith(f"passed on {LAYOUTS[name]} units"), preflight
    checks = json.loads((out / "accept" / "result.json").read_text())["checks"]
    verdicts = {c["verdict"] for c in checks}
    assert "fail" not in verdicts and "pass" in verdicts
    dep = json.loads((out / "deployment.json").read_text())
    addresses = {e["url"].rsplit(":", 1)[0].removeprefix("http://") for e in dep["endpoints"]}
    pod_ips = {p.split("=")[1] for p in engine_pods}
    assert pod_ips <= addresses  # every engine pod was reached directly
    assert leftovers(cluster) == [] and not cluster.root.exists()
    passed = sum(c["verdict"] == "pass" for c in checks)
    ran = sum(c["verdict"] != "skip" for c in checks)
    print(
        f"{name} ({kind}): {len(engine_pods)} pods ready in {ready_s:.1f} s, {passed}/{ran} checks, {took:.0f} s in all"
    )


def _group_cmdlines(pid: int) -> list[str]:
    """The command lines of a pod's entry and every process under it (pod.sh starts each
    process in a session of its own)."""
    parents: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text()
            except OSError:
                continue
            parents[int(proc.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    family, grew = {pid}, True
    while grew:
        more = {child for child, parent in parents.items() if parent in family} - family
        family |= more
        grew = bool(more)
    found = []
    for member in family:
        try:
            found.append(Path(f"/proc/{member}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


def _roll_the_decode_group(cluster: K8sDryCluster) -> None:
    before = {n.pod: n.popen.pid for n in cluster.nodes if n.popen is not None}
    recreated = cluster.apply(ROLL)
    after = {n.pod: n.popen.pid for n in cluster.nodes if n.popen is not None}
    assert sorted(recreated) == [f"sk-decode-0{s}" for s in ("", "-1", "-2", "-3")]
    for pod, pid in after.items():
        assert (pid != before[pod]) == pod.startswith("sk-decode"), pod
    decode = [n for n in cluster.nodes if n.pod.startswith("sk-decode")]
    assert all(
        any(ROLLED in line for line in _group_cmdlines(n.popen.pid))
        for n in decode
        if n.popen is not None
    )
    prefill = next(n for n in cluster.nodes if n.pod == "sk-prefill-0")
    assert prefill.popen is not None
    assert not any(ROLLED in line for line in _group_cmdlines(prefill.popen.pid))


@pytest.mark.slow
def test_the_model_is_downloaded_before_the_engines_start_with_the_secrets_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``k8s.model=hf:...``: every engine pod's init container downloads into its model
    volume with the token from the Secret and the mirror, then the engine finds it."""
    for key, value in own_homes(tmp_path).items():
        monkeypatch.setenv(key, value)
    sets = [
        "k8s.model=hf:zai-org/GLM-5.2@v1",
        "k8s.model_secret=hf-token:token",
        "k8s.model_endpoint=https://hf-mirror.example.com",
    ]
    with k8s_dry_cluster(
        "a3/glm5.2/2nodes",
        speed=10.0,
        reference=False,
        sets=sets,
        secrets={"hf-token": {"token": "t0"}},
    ) as cluster:
        records = [json.loads(p.read_text()) for p in cluster.root.rglob("fake-hub-download.json")]
        engine_pods = len(cluster.pods_arg.split(","))
    assert len(records) == engine_pods == 2
    assert all(
        r
        == {
            "repo": "zai-org/GLM-5.2",
            "revision": "v1",
            "token": True,
            "endpoint": "https://hf-mirror.example.com",
        }
        for r in records
    )
    # control: without the Secret the pod cannot start, as its env names a missing key
    with (
        pytest.raises(PodFailed, match="secret 'hf-token'"),
        k8s_dry_cluster("a3/glm5.2/2nodes", speed=10.0, reference=False, sets=sets),
    ):
        pass


def test_a_node_without_the_model_fails_the_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default model volume is the node's folder: a node without it fails the pod
    (the kubelet's hostPath type check), before any engine starts."""
    for key, value in own_homes(tmp_path).items():
        monkeypatch.setenv(key, value)
    with (
        pytest.raises(PodFailed, match="hostPath /root/model: type check failed"),
        k8s_dry_cluster("a3/glm5.2/2nodes", speed=10.0, reference=False, host_paths={}),
    ):
        pass


def test_pods_must_name_every_engine_pod(tmp_path: Path) -> None:
    """``--pods`` refused for the field it names: a pod missing, an unknown pod, no URL."""
    from servekit.catalog import load
    from servekit.verify.attach import check_attach_inputs

    layout = load("a3/glm5.1/1x2p1x4d").layout
    base = dict(name=layout.name, target="http://10.0.0.9:8080", out=tmp_path / "o")
    with pytest.raises(UsageError, match="no address for sk-decode-0-3"):
        check_attach_inputs(
            VerifyOptions(
                **base,
                pods="sk-prefill-0=10.0.0.2,sk-prefill-0-1=10.0.0.3,sk-decode-0=10.0.0.4,sk-decode-0-1=10.0.0.5,sk-decode-0-2=10.0.0.6",
            ),
            layout,
        )
    with pytest.raises(UsageError, match="give POD=ADDRESS"):
        check_attach_inputs(VerifyOptions(**base, pods="sk-other-0=10.0.0.2"), layout)
    with pytest.raises(UsageError, match="--target URL"):
        check_attach_inputs(
            VerifyOptions(name=layout.name, pods="sk-prefill-0=10.0.0.2", out=tmp_path / "o"),
            layout,
        )


def test_deployment_json_from_pods(tmp_path: Path) -> None:
    """``servekit deployment NAME --pods ... --entry URL``: each engine at its pod's address."""
    from tests.helpers.cli import servekit_inproc

    pods = {
        "sk-prefill-0": "10.1.0.2",
        "sk-prefill-0-1": "10.1.0.3",
        "sk-decode-0": "10.1.0.4",
        "sk-decode-0-1": "10.1.0.5",
        "sk-decode-0-2": "10.1.0.6",
        "sk-decode-0-3": "10.1.0.7",
    }
    out = tmp_path / "deployment.json"
    done = servekit_inproc(
        "deployment", "a3/glm5.1/1x2p1x4d", "--out", str(out),
        "--pods", ",".join(f"{k}={v}" for k, v in pods.items()),
        "--entry", "http://10.1.0.100:8080",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout
    dep = json.loads(out.read_text())
    urls = {e["name"]: e["url"] for e in dep["endpoints"]}
    assert urls["proxy"] == "http://10.1.0.100:8080"
    assert urls["prefill0.dp1"] == "http://10.1.0.3:9081"
    assert urls["decode0.dp5"] == "http://10.1.0.5:9901"  # worker 1 of the decode instance
    refused = servekit_inproc(
        "deployment", "a3/glm5.1/1x2p1x4d", "--out", str(tmp_path / "x.json"),
        "--pods", ",".join(f"{k}={v}" for k, v in pods.items()),
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    assert "--entry" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert not (tmp_path / "x.json").exists()


def _lws_pod_names(prefix: str) -> list[str]:
    """The pods LWS creates from the rendered LeaderWorkerSets: <lws>-<group>[-<worker>]."""
    import yaml

    from servekit.platforms import render_target

    _, files = render_target("a3/glm5.1/1x2p1x4d", "k8s", [f"k8s.prefix={prefix}"])
    names = []
    for text in files.values():
        for obj in yaml.safe_load_all(text) if isinstance(text, str) and "kind:" in text else ():
            if obj and obj["kind"] == "LeaderWorkerSet":
                lws, spec = obj["metadata"]["name"], obj["spec"]
                for group in range(spec["replicas"]):
                    for worker in range(spec["leaderWorkerTemplate"]["size"]):
                        names.append(f"{lws}-{group}" + (f"-{worker}" if worker else ""))
    return names


def test_pods_of_a_prefixed_rendering_are_taken_by_their_real_names(tmp_path: Path) -> None:
    """Rendered with k8s.prefix=prod, the pods LWS makes are prod-*: they are accepted
    (before: only sk-* was), and a name of another rendering among them is refused."""
    from tests.helpers.cli import servekit_inproc

    names = _lws_pod_names("prod")
    assert len(names) == 6 and all(n.startswith("prod-") for n in names)
    pods = ",".join(f"{n}=10.2.0.{i + 2}" for i, n in enumerate(names))
    out = tmp_path / "deployment.json"
    done = servekit_inproc(
        "deployment", "a3/glm5.1/1x2p1x4d", "--out", str(out), "--pods", pods,
        "--entry", "http://10.2.0.100:8080",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    urls = {e["name"]: e["url"] for e in json.loads(out.read_text())["endpoints"]}
    assert urls["prefill0.dp1"] == "http://10.2.0.3:9081"  # prod-prefill-0-1
    mixed = pods.replace("prod-decode-0-3=", "sk-decode-0-3=")
    refused = servekit_inproc(
        "deployment", "a3/glm5.1/1x2p1x4d", "--out", str(tmp_path / "x.json"), "--pods", mixed,
        "--entry", "http://10.2.0.100:8080",
    )  # fmt: skip
    assert refused.returncode == 2 and "k8s.prefix" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_ipv6_pod_addresses_make_urls_that_parse(tmp_path: Path) -> None:
    """``--pods`` with IPv6 pod IPs: every endpoint URL has its address in brackets
    (before: http://fd00::1:8100, whose port does not parse), and each one passes the
    URL check deployment.json is read back with."""
    from urllib.parse import urlsplit

    from tests.helpers.cli import servekit_inproc

    from servekit.vocabulary import check_url

    names = _lws_pod_names("sk")
    pods = {n: f"fd00::{i + 2:x}" for i, n in enumerate(names)}
    out = tmp_path / "deployment.json"
    done = servekit_inproc(
        "deployment", "a3/glm5.1/1x2p1x4d", "--out", str(out),
        "--pods", ",".join(f"{k}={v}" for k, v in pods.items()),
        "--entry", "http://[fd00::100]:8080",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    endpoints = json.loads(out.read_text())["endpoints"]
    seen = set()
    for e in endpoints:
        parts = urlsplit(e["url"])
        assert parts.port is not None and check_url(e["url"]) == e["url"], e["url"]
        seen.add(parts.hostname)
    assert set(pods.values()) <= seen
    assert (
        next(e for e in endpoints if e["name"] == "prefill0.dp1")["url"] == "http://[fd00::3]:9081"
    )
