"""verify --target / --nodes: the deployment a run attaches to, completed from the layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers.cli import servekit_cli

from servekit.catalog.loader import load
from servekit.deployment import Deployment, Endpoint, load_deployment
from servekit.errors import UsageError
from servekit.verify.attach import (
    attach_deployment,
    check_attach_inputs,
    describe,
    sim_speed_of,
    with_identity,
)
from servekit.verify.cluster import RelayMismatch
from servekit.verify.identity import Identity
from servekit.verify.options import VerifyOptions

from .test_cluster import NODES, relay_page

A3 = load("a3/1p1d").layout


def opts(**kw: object) -> VerifyOptions:
    return VerifyOptions.model_validate({"name": "a3/1p1d", **kw})


def no_fetch(url: str) -> str:
    raise OSError(f"unreachable: {url}")


def test_nodes_give_every_endpoint_and_the_logs(tmp_path: Path) -> None:
    o = opts(target="http://10.0.0.1:8080", nodes=",".join(NODES), logs=tmp_path)
    check_attach_inputs(o, A3)
    dep = attach_deployment(o, A3, load_deployment, no_fetch)
    assert dep.direct and len(dep.endpoints) == 21
    assert dep.engine == "external" and dep.image is None  # nothing assumed: asked later
    assert dep.process_logs["proxy"] == tmp_path / "proxy.log"
    assert "20 engine endpoints on 2 node(s), engines reached directly" in describe(dep)


def test_a_url_alone_learns_the_engines_from_the_proxy() -> None:
    dep = attach_deployment(
        opts(target="http://10.0.0.1:8080"),
        A3,
        load_deployment,
        lambda _: relay_page("a3/1p1d", NODES),
    )
    assert not dep.direct and dep.capabilities == ("retrieval",) and dep.model == "deepseek_v4"
    assert len(dep.by_role("decode")) == 16
    assert "only through the proxy's /metrics/engines (no --nodes)" in describe(dep)


def test_a_url_whose_proxy_cannot_be_read_says_to_pass_nodes() -> None:
    with pytest.raises(RelayMismatch, match=r"pass --nodes IP,\.\.\."):
        attach_deployment(opts(target="http://10.0.0.1:8080"), A3, load_deployment, no_fetch)


def test_a_deployment_file_gets_the_layouts_capabilities(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(Deployment(entry_url="http://h:1").model_dump_json())
    dep = attach_deployment(opts(target=str(path), logs=tmp_path), A3, load_deployment, no_fetch)
    assert dep.capabilities == ("retrieval",) and dep.layout == "a3/deepseekv4-flash/1p1d"
    assert dep.process_logs["decode0.dp0"] == tmp_path / "decode0.dp0.log"


def test_a_deployment_of_another_layout_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(Deployment(layout="a3/1p3d", entry_url="http://h:1").model_dump_json())
    with pytest.raises(UsageError, match="runs a3/1p3d, not a3/deepseekv4-flash/1p1d"):
        attach_deployment(opts(target=str(path)), A3, load_deployment, no_fetch)


def test_a_deployment_written_under_the_old_name_is_the_layouts(tmp_path: Path) -> None:
    """A deployment.json of a3/1p1d from before it was an alias attaches to its layout."""
    path = tmp_path / "d.json"
    path.write_text(Deployment(layout="a3/1p1d", entry_url="http://h:1").model_dump_json())
    old = load("a3/1p1d").aliases
    assert old == ["a3/1p1d"]
    dep = attach_deployment(opts(target=str(path)), A3, load_deployment, no_fetch, old)
    assert dep.layout == "a3/deepseekv4-flash/1p1d"
    # positive control: without the layout's old names it is another layout's
    with pytest.raises(UsageError, match="runs a3/1p1d, not a3/deepseekv4-flash/1p1d"):
        attach_deployment(opts(target=str(path)), A3, load_deployment, no_fetch)


def test_a_simulated_cluster_says_its_speed() -> None:
    state = json.dumps({"launch": {"speed": 25.0}})
    o = opts(target="http://10.0.0.1:8080", nodes=",".join(NODES), engine="sim")
    sim = Identity("sim", "the engines answered as the simulator")
    dep = with_identity(attach_deployment(o, A3, load_deployment), sim, o, lambda url: state)
    assert dep.simulated and dep.sim_speed == 25.0
    o = opts(target="http://10.0.0.1:8080", engine="sim", speed=5)
    relay = lambda _: relay_page("a3/1p1d", NODES)  # noqa: E731
    behind = with_identity(attach_deployment(o, A3, load_deployment, relay), sim, o, relay)
    assert behind.sim_speed == 5.0  # engines out of reach: the declared speed


def test_sim_speed_is_none_when_the_engine_does_not_say() -> None:
    dep = Deployment(
        entry_url="http://h:1", endpoints=(Endpoint(name="e", role="mixed", url="http://h:1"),)
    )
    assert sim_speed_of(dep, lambda _: "{}") is None
    assert sim_speed_of(dep, no_fetch) is None


def test_a_reference_url_goes_into_the_deployment() -> None:
    o = opts(nodes=",".join(NODES), reference="http://10.0.0.9:8080/")
    dep = attach_deployment(o, A3, load_deployment, no_fetch)
    assert dep.reference_url == "http://10.0.0.9:8080" and dep.entry_url == "http://10.0.0.1:8080"


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"nodes": "10.0.0.1"}, "--nodes 10.0.0.1: a3/deepseekv4-flash/1p1d runs on 2 node(s)"),
        ({"nodes": "10.0.0.1,10.0.0.2", "target": "a3/1p1d"}, "with --nodes give the entry URL"),
        (
            {"target": "http://h:1", "logs": "/nonexistent/logs"},
            "--logs /nonexistent/logs: no such folder",
        ),
        ({"logs": "."}, "--logs: only with --target or --nodes"),
        ({"reference": "http://h:2"}, "--reference: only with --target or --nodes"),
        ({"target": "http://h:1", "reference": "h:2"}, "--reference h:2: give a URL"),
        ({"speed": 5}, "only simulated engines have a speed"),
    ],
)
def test_bad_attach_inputs_are_one_line(given: dict[str, object], says: str) -> None:
    with pytest.raises(UsageError) as err:
        check_attach_inputs(opts(**given), A3)
    assert says in str(err.value)


@pytest.mark.slow
def test_servekit_deployment_writes_what_accept_and_bench_take(tmp_path: Path) -> None:
    out = tmp_path / "deployment.json"
    done = servekit_cli(
        "deployment", "a3/1p3d", "--nodes", "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4",
        "--out", str(out), "--logs", str(tmp_path), "--engine", "sim", "--speed", "50",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "52 engine endpoints" in done.stdout
    dep = load_deployment(str(out))
    assert dep.simulated and dep.sim_speed == 50 and len(dep.by_role("decode")) == 48
    assert {e.node for e in dep.by_role("decode")} == {1, 2, 3}
    again = servekit_cli("deployment", "a3/1p3d", "--nodes", "a,b,c,d", "--out", str(out))
    assert again.returncode == 0, again.stderr  # a deployment.json is replaced


@pytest.mark.slow
def test_servekit_deployment_never_clobbers_another_file(tmp_path: Path) -> None:
    precious = tmp_path / "notes.json"
    precious.write_text('{"mine": true}')
    done = servekit_cli("deployment", "a3/1p1d", "--nodes", "a,b", "--out", str(precious))
    assert done.returncode == 2 and "is not a deployment.json" in done.stderr
    assert precious.read_text() == '{"mine": true}'
    bad = servekit_cli("deployment", "a3/1p1d", "--nodes", "a", "--out", str(tmp_path / "d.json"))
    assert bad.returncode == 2 and bad.stderr.startswith("error: --nodes a:")
    assert "Traceback" not in bad.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("entry", "says"),
    [("ftp://x", "give http://HOST:PORT"), ("http://x:99999", "Port out of range")],
)
def test_servekit_deployment_checks_its_entry_url(tmp_path: Path, entry: str, says: str) -> None:
    out = tmp_path / "d.json"
    done = servekit_cli(
        "deployment", "a3/1p1d", "--nodes", "a,b", "--entry", entry, "--out", str(out)
    )
    assert done.returncode == 2 and done.stderr.startswith(f"error: --entry {entry}:")
    assert says in done.stderr and not out.exists()
