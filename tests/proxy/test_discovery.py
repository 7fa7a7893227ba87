"""Discovery on Kubernetes (issue 41 item 2): engines join and leave as their pods do.

Pods live in :mod:`tests.proxy.fakekube`'s API server; the engines they stand
for are simulated endpoints, each on its own loopback address (127.0.0.x) and
all on the same port, as pods of one LeaderWorkerSet serve the same port on
their own IPs. The proxy finds them only through the API.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings, strategies as st

from servekit.errors import UsageError
from servekit.local.ports import free_ports
from servekit.proxy.config import ProxyConfig, parse_args
from servekit.proxy.discovery import endpoints_of
from servekit.proxy.discovery_spec import (
    DiscoverySpec,
    Endpoint,
    IdRule,
    RoleSpec,
    WorkerPorts,
    load_spec,
    spec_from_doc,
)
from servekit.proxy.instances import State
from servekit.proxy.kube import PodView, pod_view
from servekit.proxy.server import RunningProxy, start_proxy
from servekit.sim.server import SimServer, serve
from servekit.sim.spec import spec_from_mapping

from .fakekube import FakeKube, lws_labels
from .harness import FAST_HEALTH, run, wait_until

APP = {"app.kubernetes.io/instance": "sk"}
STREAM = {"model": "sim-model", "prompt": "hello", "max_tokens": 4, "stream": True}


def role_labels(role: str, group: int = 0, worker: int = 0) -> dict[str, str]:
    return lws_labels(f"sk-{role}", group, worker, **APP, **{"app.kubernetes.io/component": role})


def role_spec(role: str, port: int, kv_port: int | None = None, **extra: Any) -> RoleSpec:
    selector = tuple(sorted({**APP, "app.kubernetes.io/component": role}.items()))
    return RoleSpec(role, selector, (WorkerPorts(0, (Endpoint(port, kv_port),)),), **extra)


@dataclass
class Cluster:
    kube: FakeKube
    sim: SimServer
    proxy: RunningProxy
    client: aiohttp.ClientSession
    hosts: dict[str, str]  # endpoint name -> its pod's IP

    def pool(self, role: str) -> list[Any]:
        return self.proxy.router.pools[role].members

    def healthy(self, role: str) -> list[str]:
        return [i.url for i in self.pool(role) if i.state is State.HEALTHY]

    def url(self, name: str, port: int) -> str:
        return f"http://{self.hosts[name]}:{port}"

    async def ask(self) -> tuple[int, bytes]:
        async with self.client.post(self.proxy.url + "/v1/completions", json=STREAM) as r:
            return r.status, await r.read()


def sim_endpoints(names: list[str], port: int, kv_port: int | None = None) -> dict[str, Any]:
    eps = []
    for i, name in enumerate(names):
        ep: dict[str, Any] = {"name": name, "host": f"127.0.0.{i + 2}", "port": port,
                              "role": "prefill" if name[0] == "p" else "decode"}  # fmt: skip
        if kv_port is not None:
            ep["kv_events"] = {"endpoint": f"tcp://*:{kv_port}"}
        eps.append(ep)
    return {"endpoints": eps}


@asynccontextmanager
async def cluster(
    tmp: Path, names: list[str], ready: bool = True, kv: bool = False, **cfg: Any
) -> AsyncIterator[Cluster]:
    port, kv_port = free_ports(2)
    sim = await serve(spec_from_mapping(sim_endpoints(names, port, kv_port if kv else None)))
    kube = FakeKube()
    await kube.start()
    token = tmp / "token"
    token.write_text(kube.token + "\n")
    hosts = {n: f"127.0.0.{i + 2}" for i, n in enumerate(names)}
    for name in names:
        role = "prefill" if name[0] == "p" else "decode"
        kube.add(f"sk-{role}-{name[1:]}", role_labels(role, int(name[1:])), hosts[name], ready)
    kvp = kv_port if kv else None
    spec = DiscoverySpec((role_spec("prefill", port, kvp), role_spec("decode", port, kvp)))
    config = ProxyConfig(
        discovery="kubernetes", discovered=spec, discovery_spec="spec.json",
        kube_api=kube.url, kube_token_file=str(token), kube_namespace="serving", port=0,
        **{**FAST_HEALTH, **cfg},
    )  # fmt: skip
    proxy = await start_proxy(config)
    client = aiohttp.ClientSession()
    try:
        yield Cluster(kube, sim, proxy, client, hosts)
    finally:
        await client.close()
        await proxy.stop()
        await kube.stop()
        await sim.stop()


def test_pods_join_once_ready_and_probed_and_leave_the_moment_they_terminate(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path, ["p0", "d0", "d1"], ready=False) as c:
            port = int(c.proxy.router.config.discovered.roles[0].workers[0].endpoints[0].api_port)  # type: ignore[union-attr]
            await asyncio.sleep(0.3)
            assert c.pool("prefill") == [] and c.pool("decode") == []  # nothing Ready yet
            async with c.client.get(c.proxy.url + "/health") as r:
                assert r.status == 503
            for pod in ("sk-prefill-0", "sk-decode-0", "sk-decode-1"):
                c.kube.update(pod, ready=True)
            await wait_until(lambda: len(c.healthy("decode")) == 2 and c.healthy("prefill"),
                             "discovered engines admitted")  # fmt: skip
            assert {i.origin for i in c.pool("decode")} == {"discovery"}
            assert {i.pod for i in c.pool("decode")} == {"sk-decode-0", "sk-decode-1"}
            assert (await c.ask())[0] == 200
            c.kube.terminate("sk-decode-0")  # a scale-down: the deletion timestamp first
            gone = c.url("d0", port)
            await wait_until(lambda: gone not in [i.url for i in c.pool("decode")],
                             "the terminating pod's engine left")  # fmt: skip
            d0 = c.sim.endpoints["d0"]
            before = d0.stats.generation_tokens
            for _ in range(4):
                assert (await c.ask())[0] == 200
            assert d0.stats.generation_tokens == before  # no new request reached it
            c.kube.update("sk-decode-1", ready=False)  # unready: drained, kept
            kept = c.url("d1", port)
            await wait_until(lambda: [i.state for i in c.pool("decode")] == [State.DRAINING],
                             "the unready pod's engine is drained")  # fmt: skip
            status, body = await c.ask()
            assert status == 503 and b"no_healthy_instance" in body
            c.kube.update("sk-decode-1", ready=True)
            await wait_until(lambda: c.healthy("decode") == [kept], "ready again: back")
            c.kube.delete("sk-decode-0")
            c.kube.delete("sk-decode-1")
            await wait_until(lambda: c.pool("decode") == [], "deleted pods' engines left")

    run(scenario())


def test_a_lost_watch_lists_again_and_what_it_missed_is_reconciled(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path, ["p0", "d0", "d1"]) as c:
            await wait_until(lambda: len(c.healthy("decode")) == 2, "two decoders")
            lists = sum(1 for _, q, _ in c.kube.seen if "watch" not in q)
            c.kube.pods.pop("sk-decode-1")  # gone while no event says so
            c.kube.add("sk-decode-5", role_labels("decode", 5), "127.0.0.9", ready=True)
            c.kube.rotate("token-1")  # and the service account's token rotated meanwhile
            (tmp_path / "token").write_text("token-1\n")
            c.kube.compact()  # the watch ends: 410 Gone
            await wait_until(lambda: {i.pod for i in c.pool("decode")} == {"sk-decode-0",
                                                                             "sk-decode-5"},
                             "the relist reconciled both changes")  # fmt: skip
            assert sum(1 for _, q, _ in c.kube.seen if "watch" not in q) > lists
            assert c.kube.seen[-1][2] == "Bearer token-1"  # the token file was read again

    run(scenario())


def test_kv_event_subscriptions_follow_discovered_engines(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path, ["p0", "d0"], kv=True, prefill_policy="kv-events") as c:
            kv = c.proxy.router.kv
            assert kv is not None
            await wait_until(lambda: c.healthy("prefill") and c.healthy("decode"), "admitted")
            url = c.pool("prefill")[0].url
            assert kv.sources[url].endpoint.startswith("tcp://127.0.0.2:")
            await wait_until(lambda: kv.live(url), "the discovered publisher's feed is live")
            c.kube.terminate("sk-prefill-0")
            await wait_until(lambda: url not in kv.sources and url not in kv.subscribers,
                             "the feed of the engine that left is dropped")  # fmt: skip

    run(scenario())


def pod(name: str, labels: dict[str, str], ip: str | None = "10.0.0.1", ready: bool = True,
        deleting: bool = False, uid: str | None = None) -> PodView:  # fmt: skip
    return PodView(name, labels, ip, ready, deleting, uid)


def test_each_worker_index_serves_the_ports_the_spec_gives_it() -> None:
    """A wide decode engine over two pods: the leader serves ranks 0-1, the worker 2-3."""
    spec = RoleSpec(
        "decode", (("app.kubernetes.io/component", "decode"),),
        (WorkerPorts(0, (Endpoint(9000, 5557, 5600), Endpoint(9001, 5558))),
         WorkerPorts(1, (Endpoint(9000, 5559), Endpoint(9001, 5560)))),
    )  # fmt: skip
    pods = [pod("sk-decode-0", role_labels("decode", 0, 0), "10.0.0.1"),
            pod("sk-decode-0-1", role_labels("decode", 0, 1), "10.0.0.2"),
            pod("sk-decode-1", role_labels("decode", 1, 0), "fd00::7", ready=False)]  # fmt: skip
    got = endpoints_of(spec, pods)
    assert sorted(got) == ["http://10.0.0.1:9000", "http://10.0.0.1:9001",
                           "http://10.0.0.2:9000", "http://10.0.0.2:9001",
                           "http://[fd00::7]:9000", "http://[fd00::7]:9001"]  # fmt: skip
    lead = got["http://10.0.0.1:9000"].member
    assert lead.publisher is not None and lead.publisher.endpoint == "tcp://10.0.0.1:5557"
    assert lead.publisher.replay == "tcp://10.0.0.1:5600" and lead.pod == "sk-decode-0"
    assert got["http://10.0.0.2:9001"].member.publisher.endpoint == "tcp://10.0.0.2:5560"  # type: ignore[union-attr]
    assert not got["http://[fd00::7]:9000"].ready
    worker_two = pod("sk-decode-0-2", role_labels("decode", 0, 2), "10.0.0.3")
    assert endpoints_of(spec, [worker_two]) == {}  # a worker index the spec has no ports for


def test_bootstrap_mode_names_the_engine_and_its_leaders_bootstrap_server() -> None:
    by_pod = role_spec("prefill", 8000, bootstrap_port=8998, engine_id_prefix="pf-")
    by_group = role_spec("prefill", 8000, bootstrap_port=8998, engine_id_from="group_index")
    two = RoleSpec("prefill", by_pod.selector, (*by_pod.workers, WorkerPorts(1, (Endpoint(8000),))),
                   bootstrap_port=8998)  # fmt: skip
    leader = pod("sk-prefill-3", role_labels("prefill", 3, 0), "10.0.0.5")
    worker = pod("sk-prefill-3-1", role_labels("prefill", 3, 1), "10.0.0.6")
    assert endpoints_of(by_pod, [leader])["http://10.0.0.5:8000"].member.bootstrap == (
        "pf-sk-prefill-3",
        "http://10.0.0.5:8998",
    )
    assert endpoints_of(by_group, [leader])["http://10.0.0.5:8000"].member.bootstrap == (
        "3",
        "http://10.0.0.5:8998",
    )
    both = endpoints_of(two, [leader, worker])
    assert both["http://10.0.0.6:8000"].member.bootstrap == ("sk-prefill-3", "http://10.0.0.5:8998")
    assert endpoints_of(two, [worker]) == {}  # its leader (the bootstrap server) not known yet


def test_dp_ranks_and_pod_incarnations_are_named_as_the_engines_register_them() -> None:
    """External-DP ranks each with its own bootstrap server on its pod (the endpoint's
    port) are named ``<id>-<pod uid>_dp<rank>``: vLLM's suffix per rank, and the uid of
    the pod serving it, so a pod made again under its name is a new id; a pod whose uid
    is not known (or not a uid) is not routed rather than named without it."""
    ranks = (Endpoint(8100, dp_rank=0, bootstrap_port=8998),
             Endpoint(8101, dp_rank=1, bootstrap_port=8999))  # fmt: skip
    spec = RoleSpec("prefill", role_spec("prefill", 1).selector, (WorkerPorts(0, ranks),),
                    engine_id_from="id_rule", engine_ids=RULE, engine_id_pod_uid=True)  # fmt: skip
    first, again = "0b5e-aa", "77c1-ff"
    made = pod("sk-prefill-1", role_labels("prefill", 1, 0), "10.0.0.5", uid=first)
    got = {u: w.member.bootstrap for u, w in endpoints_of(spec, [made]).items()}
    assert got == {"http://10.0.0.5:8100": (f"4-{first}_dp0", "http://10.0.0.5:8998"),
                   "http://10.0.0.5:8101": (f"4-{first}_dp1", "http://10.0.0.5:8999")}  # fmt: skip
    remade = pod("sk-prefill-1", role_labels("prefill", 1, 0), "10.0.0.5", uid=again)
    assert endpoints_of(spec, [remade])["http://10.0.0.5:8101"].member.bootstrap == (
        f"4-{again}_dp1", "http://10.0.0.5:8999")  # fmt: skip
    assert endpoints_of(spec, [pod("sk-prefill-1", role_labels("prefill", 1, 0))]) == {}
    restarted = pod_view({"metadata": {"name": "sk-prefill-1", "uid": again,
                                       "labels": role_labels("prefill", 1, 0)},
                          "status": {"podIP": "10.0.0.5",
                                     "conditions": [{"type": "Ready", "status": "True"}],
                                     "containerStatuses": [{"restartCount": 1}]}})  # fmt: skip
    assert restarted is not None and restarted.restarted and restarted.ready
    assert not any(w.ready for w in endpoints_of(spec, [restarted]).values())  # until LWS remakes
    doc = DiscoverySpec((spec, role_spec("decode", 8000))).to_doc()
    assert spec_from_doc(doc).roles[0] == spec  # the document says all of it
    for bad in ("", "UPPER", "a b", "x" * 65, "-lead", "0b5e;rm"):
        view = pod_view({"metadata": {"name": "p", "uid": bad}})
        assert view is not None and view.uid is None, bad
    assert pod_view({"metadata": {"name": "p", "uid": first}}).uid == first  # type: ignore[union-attr]


RULE = IdRule(2, 10, 3, 1, ("0", "4"))  # two rendered instances (ids 0, 4), then 11, 14, 17...


def test_an_id_rule_names_rendered_instances_by_their_ids_and_the_rest_by_the_rule() -> None:
    by_rule = role_spec("prefill", 8000, bootstrap_port=8998, engine_id_prefix="pf-",
                        engine_id_from="id_rule", engine_ids=RULE)  # fmt: skip
    names = {}
    for g in (0, 1, 2, 3, 999_999_999):
        leader = pod(f"sk-prefill-{g}", role_labels("prefill", g, 0), "10.0.0.5")
        names[g] = endpoints_of(by_rule, [leader])["http://10.0.0.5:8000"].member.bootstrap
    assert names == {
        0: ("pf-0", "http://10.0.0.5:8998"),
        1: ("pf-4", "http://10.0.0.5:8998"),
        2: ("pf-11", "http://10.0.0.5:8998"),
        3: ("pf-14", "http://10.0.0.5:8998"),
        999_999_999: (f"pf-{10 + (999_999_999 - 2) * 3 + 1}", "http://10.0.0.5:8998"),
    }
    for label in ("010", "00", "-1", "1e3", "\u00b2", "\u0663", "1234567890"):  # not LWS's decimal
        odd = pod("sk-prefill-x", {**role_labels("prefill"), "leaderworkerset.sigs.k8s.io/"
                                   "group-index": label}, "10.0.0.5")  # fmt: skip
        assert odd.group_index is None, label
        assert endpoints_of(by_rule, [odd]) == {}, label  # no id: not routed under a guess


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**9), st.integers(0, 2**20), st.integers(1, 64), st.data())
def test_an_id_rule_read_from_its_document_names_what_its_formula_gives(
    index: int, base: int, step: int, data: st.DataObject
) -> None:
    offset = data.draw(st.integers(0, step - 1))
    rendered = data.draw(st.lists(st.text("abc:-_.", min_size=1, max_size=6), min_size=1,
                                  max_size=5, unique=True))  # fmt: skip
    doc = spec_doc()
    doc["roles"][0]["engine_ids"] = {"rendered": rendered, "base": base, "step": step,
                                     "offset": offset}  # fmt: skip
    rule = spec_from_doc(doc).roles[0].engine_ids
    assert rule is not None and rule.rendered == len(rendered)
    want = rendered[index] if index < len(rendered) else str(
        base + (index - len(rendered)) * step + offset)  # fmt: skip
    assert rule.engine_id(index) == want


def test_pod_view_reads_only_what_it_trusts() -> None:
    good = {"metadata": {"name": "a", "labels": {"k": "v", "n": 3}, "deletionTimestamp": "t"},
            "status": {"podIP": "10.1.2.3", "conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip
    view = pod_view(good)
    assert view == PodView("a", {"k": "v"}, "10.1.2.3", True, True)
    for bad in (None, [], {"metadata": []}, {"metadata": {"name": 3}}, {"metadata": {}}):
        assert pod_view(bad) is None
    odd = pod_view({"metadata": {"name": "b"}, "status": {"podIP": "10.0.0.1; rm -rf /"}})
    assert odd is not None and odd.ip is None and not odd.ready


def spec_doc() -> dict[str, Any]:
    prefill = role_spec("prefill", 8000, 5557, bootstrap_port=8998, engine_id_from="id_rule",
                        engine_ids=RULE)  # fmt: skip
    return DiscoverySpec((prefill, role_spec("decode", 8000)), namespace="serving").to_doc()


def test_the_spec_round_trips_and_bad_specs_name_the_field(tmp_path: Path) -> None:
    doc = spec_doc()
    assert spec_from_doc(json.loads(json.dumps(doc))).to_doc() == doc
    cases: list[tuple[Any, str]] = [
        ({**doc, "version": 2}, "version"),
        ({**doc, "extra": 1}, "unknown field 'extra'"),
        ({**doc, "roles": []}, "roles"),
        ({**doc, "roles": doc["roles"][:1]}, "prefill and decode"),
        ({**doc, "namespace": "Bad_NS"}, "namespace"),
    ]
    role = doc["roles"][1]
    for patch, field in [({"selector": {}}, "selector"), ({"selector": {"k": "a b"}}, "k"),
                         ({"role": "oracle"}, "role"), ({"bootstrap_port": 1}, "bootstrap_port"),
                         ({"workers": [{"worker_index": 0, "endpoints": [{"api_port": 0}]}]},
                          "api_port"),
                         ({"workers": [{"worker_index": 0, "endpoints": [{"api_port": 1}]}] * 2},
                          "worker_index"),
                         ({"workers": [{"worker_index": 0, "endpoints": [
                             {"api_port": 1, "bootstrap_port": 2}]}]},
                          r"endpoints\[0\]\.bootstrap_port: only a prefill role"),
                         ({"workers": [{"worker_index": 0, "endpoints": [
                             {"api_port": 1, "dp_rank": 1}]}]}, "dp_rank: names a DP rank"),
                         ({"workers": [{"worker_index": 0, "endpoints": [
                             {"api_port": 1, "dp_rank": -1}]}]}, "dp_rank: expected"),
                         ({"engine_id_pod_uid": True}, "engine_id_pod_uid: engine ids name"),
                         ({"engine_id_pod_uid": "yes"}, "engine_id_pod_uid: expected true")]:  # fmt: skip
        cases.append(({**doc, "roles": [doc["roles"][0], {**role, **patch}]}, field))
    rule = doc["roles"][0]["engine_ids"]
    prefill = doc["roles"][0]
    for patch, field in [
        ({"engine_id_from": "leader_pod"}, "engine_ids: applies to engine_id_from id_rule"),
        ({"engine_ids": None}, "engine_ids: expected an object"),
        ({"engine_ids": {**rule, "offset": 3}}, "offset: expected a whole number from 0 to 2"),
        ({"engine_ids": {**rule, "step": 0}}, "step"),
        ({"engine_ids": {**rule, "base": -1}}, "base"),
        ({"engine_ids": {**rule, "base": True}}, "base"),
        ({"engine_ids": {**rule, "base": 1 << 41}}, "base"),
        ({"engine_ids": {**rule, "rendered": []}}, "rendered: expected a list of 1"),
        ({"engine_ids": {**rule, "rendered": ["0", "0"]}}, "given twice"),
        ({"engine_ids": {**rule, "rendered": ["a b"]}}, r"rendered\[0\]"),
        ({"engine_ids": {**rule, "rendered": ["0", "14"]}}, "would get engine id 14"),
        ({"engine_ids": {**rule, "extra": 1}}, "unknown field 'extra'"),
    ]:
        cases.append(({**doc, "roles": [{**prefill, **patch}, role]}, field))
    no_id = {k: v for k, v in prefill.items() if k != "engine_ids"}
    cases.append(({**doc, "roles": [no_id, role]}, "engine_id_from id_rule needs the rule"))
    no_port = {k: v for k, v in prefill.items() if k != "bootstrap_port"}
    cases.append(({**doc, "roles": [no_port, role]}, "give bootstrap_port"))
    twin = {**prefill, "selector": {"servekit.io/group": "sk-prefill1"}}
    cases.append(({**doc, "roles": [prefill, twin, role]}, "meet those of roles\\[1\\]"))
    other = {**twin, "engine_ids": {**rule, "rendered": ["7"], "offset": 2}}
    assert len(spec_from_doc({**doc, "roles": [prefill, other, role]}).roles) == 3  # 11+3k, 12+3k
    for bad, field in cases:
        with pytest.raises(UsageError, match=field) as caught:
            spec_from_doc(bad)
        assert "\n" not in caught.value.message
    path = tmp_path / "spec.json"
    path.write_text("{")
    with pytest.raises(UsageError, match="not JSON"):
        load_spec(str(path))
    path.write_text(json.dumps(doc))
    cfg = parse_args(["--discovery", "kubernetes", "--discovery-spec", str(path)])
    assert cfg.discovered == spec_from_doc(doc) and cfg.mode == "pd"
    with pytest.raises(UsageError, match="--discovery-spec"):
        parse_args(["--discovery", "kubernetes"])
    bootstrap = ["--mode", "bootstrap", "--discovery", "kubernetes", "--discovery-spec", str(path)]
    assert parse_args(bootstrap).discovered == spec_from_doc(doc)
    path.write_text(json.dumps({**doc, "roles": [no_port, role]}))
    with pytest.raises(UsageError, match="bootstrap_port"):
        parse_args(bootstrap)
    plain = {k: v for k, v in no_port.items() if not k.startswith("engine_id")}
    path.write_text(json.dumps({**doc, "roles": [plain, role]}))
    with pytest.raises(
        UsageError, match=r"--mode bootstrap: prefill role .* has no bootstrap_port"
    ):
        parse_args(bootstrap)
    with pytest.raises(UsageError, match="--discovery kubernetes"):
        parse_args(["--prefill", "http://a:1", "--decode", "http://b:1", "--discovery-spec", "x"])


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 70000) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=12), kids,
                                                              max_size=4),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(JSONISH, st.sampled_from(["roles", "workers", "selector", "endpoints", "top",
                                  "engine_ids", "rendered", "base", "step", "offset"]))  # fmt: skip
def test_any_spec_document_is_read_or_refused_in_one_line(junk: Any, where: str) -> None:
    doc = spec_doc()
    if where == "top":
        doc = junk
    elif where == "engine_ids":
        doc["roles"][0]["engine_ids"] = junk
    elif where in ("rendered", "base", "step", "offset"):
        doc["roles"][0]["engine_ids"][where] = junk
    elif where == "roles":
        doc["roles"][0] = junk
    elif where == "workers":
        doc["roles"][1]["workers"][0] = junk
    elif where == "selector":
        doc["roles"][1]["selector"] = junk
    else:
        doc["roles"][1]["workers"][0]["endpoints"] = junk
    try:
        spec_from_doc(doc)
    except UsageError as exc:
        assert "\n" not in exc.message


@settings(max_examples=200, deadline=None)
@given(JSONISH)
def test_any_pod_object_is_read_or_skipped(junk: Any) -> None:
    for obj in (junk, {"metadata": junk}, {"metadata": {"name": "a"}, "status": junk}):
        view = pod_view(obj)
        assert view is None or isinstance(view, PodView)


def test_a_pods_prestop_call_names_it_and_joins_the_drain_its_deletion_started(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path, ["p0", "d0", "d1"], admin=True, admin_key="adm") as c:
            await wait_until(lambda: len(c.healthy("decode")) == 2, "two decoders")
            leave = c.proxy.url + "/admin/instances/leave"
            doc = {"pod": "sk-decode-0", "wait_s": 5}
            async with c.client.post(leave, json=doc) as r:
                assert r.status == 401  # the hook must carry the admin key
            c.kube.terminate("sk-decode-0")  # the kubelet runs the hook as the pod terminates
            auth = {"Authorization": "Bearer adm"}
            async with c.client.post(leave, json=doc, headers=auth) as r:
                out = await r.json()
            assert r.status == 200 and out["drained"] is True
            assert [i.pod for i in c.pool("decode")] == ["sk-decode-1"]
            async with c.client.post(leave, json={"pod": "sk-decode-0"}, headers=auth) as r:
                assert r.status == 200 and (await r.json())["drained"] is True  # gone: done
            assert (await c.ask())[0] == 200

    run(scenario())


def _openssl(*args: str, cwd: Path) -> None:
    import subprocess

    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _certificates(tmp: Path) -> None:
    """A CA, and a server certificate for 127.0.0.1 it signed (what a cluster's API has)."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=fake-ca",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=tmp)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kubernetes", "-keyout",
             "api.key", "-out", "api.csr", cwd=tmp)  # fmt: skip
    (tmp / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "api.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "1", "-extfile", "san.ext", "-out", "api.crt", cwd=tmp)  # fmt: skip
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
             "/CN=other-ca", "-keyout", "other.key", "-out", "other.crt", cwd=tmp)  # fmt: skip


@pytest.mark.tools
@pytest.mark.slow
def test_the_api_servers_certificate_is_checked_against_the_service_accounts_ca(
    tmp_path: Path,
) -> None:
    import ssl

    from servekit.proxy.kube import KubeApi, KubeError

    _certificates(tmp_path)
    token = tmp_path / "token"
    token.write_text("token-0")

    async def scenario() -> None:
        kube = FakeKube()
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(tmp_path / "api.crt", tmp_path / "api.key")
        await kube.start(tls=tls)
        kube.add("sk-decode-0", role_labels("decode"), "10.0.0.1", ready=True)
        try:
            api = KubeApi(kube.url, str(token), str(tmp_path / "ca.crt"))
            pods, _ = await api.list_pods("serving", "app.kubernetes.io/component=decode")
            await api.close()
            assert [p.name for p in pods] == ["sk-decode-0"]
            other = KubeApi(kube.url, str(token), str(tmp_path / "other.crt"))  # the control
            with pytest.raises(KubeError, match="ClientConnectorCertificateError"):
                await other.list_pods("serving", "app.kubernetes.io/component=decode")
            await other.close()
        finally:
            await kube.stop()

    run(scenario())
