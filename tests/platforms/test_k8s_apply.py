"""``kubectl apply -k`` and ``kubectl apply --server-side -k`` take every rendering (issue 42).

- every object of every catalog layout (and with every option on) fits the client-side
  apply annotation cap, computed as kubectl computes it (:mod:`servekit.platforms.k8s.
  configmaps`), and each ConfigMap the API server's 1 MiB;
- that computation equals the annotation real kubectl writes: ``kubectl apply
  --dry-run=client -o json -k DIR`` against a stand-in API server
  (tests/platforms/kubectl_stub.py), and ``kubectl apply --server-side --dry-run=server
  -k DIR`` sends every object; a control made over the cap is refused by the check;
- ``kubectl kustomize`` builds every layout's folder (one run over all of them);
- a file larger than a ConfigMap is cut into parts that ``pod.sh`` joins, byte for byte.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings, strategies as st
from tests.platforms.kubectl_stub import api_server, applied_objects, kubectl, run_kubectl
from tests.platforms.rendered import CATALOG, EVERYTHING, LAYOUTS, PD_LAYOUTS, files, objects

from servekit.platforms.k8s.configmaps import (
    ANNOTATION_CAP,
    BUDGET,
    CONFIGMAP_CAP,
    LAST_APPLIED,
    data_bytes,
    last_applied_bytes,
    pack,
)

ALL_ON = EVERYTHING  # every option at once (tests/platforms/rendered.py), rendered once


def _write(folder: Path, rendered: dict[str, str | bytes]) -> Path:
    folder.mkdir(parents=True)
    for name, text in rendered.items():
        (folder / name).write_text(text) if isinstance(text, str) else (folder / name).write_bytes(
            text
        )
    return folder


@pytest.mark.slow
def test_every_object_of_every_layout_fits_kubectl_applys_caps() -> None:
    over = {}
    biggest = (0, "")
    for name in LAYOUTS:
        for kind in ("leaderworkerset", *(["disaggregatedset"] if name in PD_LAYOUTS else [])):
            settings_ = (
                ALL_ON if CATALOG[name].hardware.is_ascend and kind == "leaderworkerset" else ()
            )
            for obj in objects(name, kind) + objects(name, kind, settings_):
                size = last_applied_bytes(obj)
                where = f"{name} {kind} {obj['kind']} {obj['metadata']['name']}"
                biggest = max(biggest, (size, where))
                if size > BUDGET or (
                    obj["kind"] == "ConfigMap" and data_bytes(obj) > CONFIGMAP_CAP
                ):
                    over[where] = size
    assert not over, over
    print(f"largest object: {biggest[1]} at {biggest[0]} of {ANNOTATION_CAP} bytes")


def _built_with_namespace(folder: Path) -> dict[tuple[str, str], int]:
    """Each object as kustomize builds it (the image set) in the namespace kubectl adds,
    measured here."""
    done = subprocess.run(
        [kubectl(), "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    mine = {}
    for obj in yaml.safe_load_all(done.stdout):
        obj["metadata"]["namespace"] = "default"
        mine[obj["kind"], obj["metadata"]["name"]] = last_applied_bytes(obj)
    return mine


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "kind"),
    [("a3/glm5.1/1x2p1x4d", "leaderworkerset"), ("a3/deepseekv4-flash/1p3d", "disaggregatedset")],
)
def test_real_kubectl_applies_the_folder_both_ways(tmp_path: Path, name: str, kind: str) -> None:
    """The annotation kubectl writes is the size computed here, byte for byte, and within
    the cap; server-side apply sends every object (each far under the request limit)."""
    folder = _write(tmp_path / "r", files(name, kind, ALL_ON if kind == "leaderworkerset" else ()))
    mine = _built_with_namespace(folder)
    with api_server() as (url, patches):
        client = run_kubectl(
            url, "apply", "--dry-run=client", "--validate=false", "-o", "json", "-k", str(folder)
        )
        assert client.returncode == 0, client.stderr
        applied = applied_objects(client.stdout)
        server = run_kubectl(
            url,
            "apply",
            "--server-side",
            "--dry-run=server",
            "--validate=false",
            "-o",
            "json",
            "-k",
            str(folder),
        )
        assert server.returncode == 0, server.stderr
    assert {(o["kind"], o["metadata"]["name"]) for o in applied} == set(mine)
    for obj in applied:
        annotations = obj["metadata"]["annotations"]
        real = sum(len(k) + len(v.encode()) for k, v in annotations.items())
        assert real == mine[obj["kind"], obj["metadata"]["name"]], obj["metadata"]["name"]
        assert real <= ANNOTATION_CAP
        assert json.loads(annotations[LAST_APPLIED])["kind"] == obj["kind"]
    assert len(patches) == len(mine)
    assert max(size for _, size in patches) < 1 << 20


def test_the_cap_check_refuses_an_object_over_it() -> None:
    """Control: the proxy's ConfigMap with its largest file held twice is over the cap, by
    the same measure (the zipapp may be one file or cut into parts)."""
    cm = next(
        o for o in objects("a3/glm5.1/1x2p1x4d") if o["metadata"]["name"] == "sk-proxy-scripts"
    )
    largest = max(cm["binaryData"].values(), key=len)
    doubled = {**cm, "binaryData": {**cm["binaryData"], "copy.pyz": largest}}
    assert last_applied_bytes(cm) <= BUDGET < ANNOTATION_CAP < last_applied_bytes(doubled)


@pytest.mark.slow
def test_kubectl_kustomize_builds_every_layout(tmp_path: Path) -> None:
    """One ``kubectl kustomize`` over every layout's folder, each in a namespace of its own
    (as an operator's overlay), and the disaggregated ones as a DisaggregatedSet too."""
    entries = []
    expected = 0
    for i, name in enumerate(LAYOUTS):
        for kind in ("leaderworkerset", *(["disaggregatedset"] if name in PD_LAYOUTS else [])):
            rendered = files(name, kind)
            base = _write(tmp_path / f"l{i}-{kind[0]}" / "base", rendered)
            expected += len(objects(name, kind))
            overlay = base.parent / "overlay"
            overlay.mkdir()
            (overlay / "kustomization.yaml").write_text(
                yaml.safe_dump(
                    {
                        "resources": ["../base"],
                        "namespace": f"l{i}-{kind[0]}",
                        # the base maps servekit-engine to the layout's image: an overlay
                        # names that image (docs/kubernetes.md), or render with k8s.image
                        "images": [
                            {
                                "name": _image_name(base),
                                "newName": "registry.example/vllm",
                                "newTag": "x",
                            }
                        ],
                    }
                )
            )
            entries.append(f"l{i}-{kind[0]}/overlay")
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({"resources": entries}))
    done = subprocess.run(
        [kubectl(), "kustomize", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    built = [o for o in yaml.safe_load_all(done.stdout) if o]
    assert len(built) == expected
    images = {
        c["image"]
        for o in built
        if o["kind"] in ("LeaderWorkerSet", "Deployment")
        for c in (
            o["spec"].get("template", {}).get("spec", {}).get("containers", [])
            or o["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]
        )
    }
    assert images == {"registry.example/vllm:x"}


def _image_name(base: Path) -> str:
    (entry,) = yaml.safe_load((base / "kustomization.yaml").read_text())["images"]
    return str(entry.get("newName", entry["name"]))


def _join_with_pod_sh(folder: Path, run: Path, group: str) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "DRY_RUN": "1",
        "POD_IP": "10.0.0.2",
        "SERVEKIT_RUN_DIR": str(run),
    }
    env |= {"SERVEKIT_GROUP_INDEX": "0", "LWS_WORKER_INDEX": "0", "NODE_NIC": "eth0"}
    done = subprocess.run(
        ["bash", str(folder / "pod.sh"), group],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_a_file_larger_than_a_configmap_is_cut_and_joined_by_pod_sh(tmp_path: Path) -> None:
    """With a small budget the proxy zipapp goes in parts over several ConfigMaps, and the
    proxy's ``pod.sh`` joins them (checked against the digest) before anything runs."""
    from servekit.platforms.k8s.build import render_k8s
    from servekit.platforms.k8s.settings import parse_settings
    from servekit.render import build_plan, bundle_files

    name = "a3/glm5.1/1x2p1x4d"
    layout = CATALOG[name]
    bundled = bundle_files()
    budget = 60_000
    rendered = render_k8s(build_plan(layout), layout, parse_settings({}, layout), bundled, budget)
    cms = [o for o in yaml.safe_load_all(str(rendered["configmaps.yaml"])) if o]
    proxy = [o for o in cms if o["metadata"]["name"].startswith("sk-proxy-scripts")]
    assert len(proxy) >= 4 and all(last_applied_bytes(o) <= budget for o in cms)
    folder = tmp_path / "proxy"
    folder.mkdir()
    for cm in proxy:
        for key, text in cm.get("data", {}).items():
            (folder / key).write_text(text)
        for key, blob in cm.get("binaryData", {}).items():
            (folder / key).write_bytes(base64.b64decode(blob))
    assert not (folder / "servekit-proxy.pyz").exists()
    _join_with_pod_sh(folder, tmp_path / "run", "proxy")
    assert (tmp_path / "run" / "servekit-proxy.pyz").read_bytes() == bundled["servekit-proxy.pyz"]
    # control: a damaged part is refused by its digest
    part = next(folder.glob("servekit-proxy.pyz.part001"))
    part.write_bytes(b"x" + part.read_bytes()[1:])
    with pytest.raises(AssertionError, match="digest"):
        _join_with_pod_sh(folder, tmp_path / "run2", "proxy")


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9_.-]{0,20}", fullmatch=True),
        st.one_of(st.binary(max_size=9000), st.text(max_size=3000).map(str.encode)),
        max_size=12,
    )
)
def test_packed_configmaps_stay_under_the_budget_and_hold_every_file(
    files_: dict[str, bytes],
) -> None:
    budget = 6_000
    packed, splits = pack("x", files_, {"app": "x"}, budget)
    got: dict[str, bytes] = {}
    for obj in packed:
        assert last_applied_bytes(obj) <= budget
        for key, text in obj.get("data", {}).items():
            got[key] = text.encode()
        for key, blob in obj.get("binaryData", {}).items():
            got[key] = base64.b64decode(blob)
    for split in splits:
        got[split.name] = b"".join(got.pop(f"{split.name}.part{i:03d}") for i in range(split.parts))
    assert got == files_
