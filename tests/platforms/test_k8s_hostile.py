"""Hostile text in a layout's free-text fields, rendered for Kubernetes: run, never executed.

tests/render/test_hostile.py proves the ModelArts and plain-node scripts print a
hostile value literally and run nothing. The Kubernetes rendering writes the same
process scripts behind its own entry, ``pod.sh``, on changed addresses; this runs
each pod the way LWS starts it (``bash pod.sh GROUP``, ``DRY_RUN=1``, the pod's
environment) and compares every process it prints with the ModelArts script run
under ``dash`` on the same addresses: equal byte for byte, and the canary folder
stays empty. The proxy's pod prints its command with the hostile key file as given.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given, strategies as st
from tests.render.test_hostile import CANARY, HYPO, SLOTS, _fill, _small_a3

from servekit.catalog.schema import Layout
from servekit.platforms import render_files
from servekit.platforms.k8s.build import decide, render_k8s
from servekit.platforms.k8s.settings import parse_settings
from servekit.render import build_plan


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        argv,
        env={"PATH": os.environ["PATH"], "DRY_RUN": "1", **env},
        cwd=cwd,
        capture_output=True,
        timeout=60,
        check=True,
    )
    return done.stdout.decode("utf-8")


def _prove(h: dict[str, str], work: Path) -> None:
    layout = Layout.model_validate(_fill(_small_a3(), h))
    plan = build_plan(layout)
    options = parse_settings({}, layout)
    rendering = decide(plan, layout, options)
    files = render_k8s(plan, layout, options, {})
    maps = {o["metadata"]["name"]: o for o in yaml.safe_load_all(files["configmaps.yaml"]) if o}
    k8s, ma = work / "k8s", work / "ma"
    for key, content in render_files(plan, "modelarts").items():
        if key.endswith(".sh"):
            (ma / key).parent.mkdir(parents=True, exist_ok=True)
            (ma / key).write_text(str(content), encoding="utf-8")

    def mounted(name: str) -> Path:
        folder = k8s / name
        folder.mkdir(parents=True)
        for cm in (maps[f"{name}-scripts"], maps.get("sk-bundle", {})):
            for key, text in cm.get("data", {}).items():
                (folder / key).write_text(text, encoding="utf-8")
        return folder

    ips = {node: f"10.9.0.{node + 2}" for node in range(layout.nodes)}
    for group in rendering.groups:
        folder = mounted(group.name)
        for pod in group.pods:
            leader = group.pod(pod.instance, 0).node
            env = {
                "POD_IP": ips[pod.node],
                "SERVEKIT_GROUP_INDEX": str(pod.instance),
                "LWS_WORKER_INDEX": str(pod.worker),
                "LWS_GROUP_SIZE": str(group.size),
                "LWS_LEADER_ADDRESS": ips[leader],
                "NODE_NIC": "eth9",
            }
            shown = _run(["bash", str(folder / "pod.sh"), group.name], env, work).split("\n# ")
            for proc, block in zip(pod.processes, shown[1:], strict=True):
                given = {
                    "NODE_IP": ips[pod.node],
                    "NODE_NIC": "eth9",
                    f"NODE{leader}_IP": ips[leader],
                    "BUNDLE_DIR": str(folder),
                }
                want = _run(["dash", str(ma / f"{proc.name}.sh")], given, work)
                assert block.split("\n", 1)[1] == want, proc.name
    proxy_folder = k8s / "proxy"
    proxy_folder.mkdir(parents=True)
    for key, text in maps["sk-proxy-scripts"].get("data", {}).items():
        (proxy_folder / key).write_text(text, encoding="utf-8")
    proxy = _run(["bash", str(proxy_folder / "pod.sh"), "proxy"], {"POD_IP": "10.9.0.100"}, work)
    # a value starting with - is joined to its flag, so the proxy's parser takes it
    given = f"\n--api-key-file\n{h['file']}\n", f"\n--api-key-file={h['file']}\n"
    assert any(g in proxy for g in given)
    assert not any(CANARY.iterdir()), sorted(CANARY.iterdir())


@pytest.mark.slow  # 25 renderings, three pods each under bash (about 1 s each here)
@HYPO
@given(st.fixed_dictionaries(SLOTS))
def test_hostile_values_in_a_kubernetes_rendering_never_run(h: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as work:
        _prove(h, Path(work))


def test_the_same_proof_holds_for_one_hostile_layout(tmp_path: Path) -> None:
    """One fixed hostile value per slot (the unmarked run of the proof above)."""
    from tests.render.test_hostile import PIECES

    _prove({slot: "x" + "".join(PIECES[:8]) for slot in SLOTS}, tmp_path)
