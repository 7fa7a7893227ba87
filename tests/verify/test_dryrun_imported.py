"""One simulated cluster per source model/hardware folder, verified with --target --nodes.

For one imported layout of each of the 8 folders of xuopoj/ma-vllm-samples@64fc020
(the 8-node ``a2/glm5.2/1x4p1x4d`` among them), the rendered ModelArts entry runs
on every loopback node under dash with the simulated ``vllm``
(:mod:`servekit.platforms.modelarts.fake`), and ``servekit verify NAME --target URL --nodes
...`` must pass; teardown leaves no process and no folder. One per folder only:
each cluster costs 10-30 s on 2 cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers.cli import own_homes, servekit_cli, wide_env

from servekit.platforms import dry_cluster, leftovers

ONE_PER_FOLDER = (
    "a2/deepseekv4-flash/2p1x2d",
    "a3/deepseekv4-flash/1node",
    "a3/deepseekv4-pro/2nodes",
    "a3/glm5.1/1x2p1x2d",
    "a2/glm5.2/1x4p1x4d",
    "a3/glm5.2/4nodes",
    "a2/qwen3.5-397b-a17b/2nodes",
    "a3/qwen3.5-397b-a17b/1node",
)


def test_the_set_covers_every_folder() -> None:
    folders = {(n.split("/")[1], n.split("/")[0]) for n in ONE_PER_FOLDER}
    assert len(folders) == len(ONE_PER_FOLDER) == 8


@pytest.mark.slow
@pytest.mark.parametrize("name", ONE_PER_FOLDER)
def test_the_simulated_cluster_passes_verify_with_nodes(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    homes = own_homes(tmp_path)
    for key, value in homes.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "out"
    with dry_cluster(name, speed=10.0) as cluster:
        args = [*cluster.verify_args(), "--engine", "sim", "--out", str(out), "--no-baseline"]
        assert "--nodes" in args
        done = servekit_cli("verify", *args, env=wide_env(**homes), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"# Verification of {name}: PASS (simulated)")
    checks = json.loads((out / "accept" / "result.json").read_text())["checks"]
    verdicts = {c["verdict"] for c in checks}
    assert "fail" not in verdicts and "pass" in verdicts
    dep = json.loads((out / "deployment.json").read_text())
    addresses = {e["url"].rsplit(":", 1)[0].removeprefix("http://") for e in dep["endpoints"]}
    assert addresses <= set(cluster.addresses) and addresses
    run = json.loads((out / "run.json").read_text())  # the nodes' preflight, recorded
    assert run["observed"]["preflight"].startswith(f"passed on {len(cluster.addresses)} units")
    assert leftovers(cluster) == []
    assert not cluster.root.exists()
