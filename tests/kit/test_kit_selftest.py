"""selftest.sh inside a rebuilt image: L1 payload sha256 and L2 py_compile + engine import.

The base image is made on this machine from its own python, shell and
coreutils (:mod:`.pythonimage`, no registry), the kit is rebuilt onto it,
``umoci`` unpacks the result, and ``selftest.sh image`` runs in that root
filesystem with ``chroot``, as ``docker run`` would run it. Its log then feeds
``kit verify --smoke``. Needs root (chroot, umoci keeping owners): marker tools.

The smoke row's proof: the nonce a verify run issued must come back from
inside the rebuilt rootfs, bound to that rootfs' files. The positive control
(the real run with the issued nonce) passes; an earlier run's log, a run
outside the image and a hand-written log each fail for their own reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from servekit.kit import verify_kit, verify_release
from servekit.kit.build import BuildResult, build_kit
from servekit.kit.kitarchive import unpack
from servekit.kit.options import KitBuildOptions, KitRebuildOptions, KitVerifyOptions
from servekit.kit.rebuild import rebuild_kit
from servekit.kit.smokeproof import NONCE_FILE, issue_nonce, read_nonce
from servekit.kit.streams import Limits

from .imagegen import write_oci
from .pythonimage import python_base_layers
from .test_kit_release import git

pytestmark = pytest.mark.tools

ENGINE = "0.27.1"


def need_root_and_umoci() -> None:
    if shutil.which("umoci") is None:
        pytest.fail("umoci is not installed: run scripts/bootstrap.sh tools")
    if os.geteuid() != 0:
        pytest.fail("chroot and umoci unpack need root (run the tools tests as root)")


@pytest.fixture(scope="module")
def python_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_oci(tmp_path_factory.mktemp("pybase") / "base", python_base_layers(ENGINE))


def build(tmp_path: Path, base: Path, engine: str = ENGINE) -> BuildResult:
    project = tmp_path / "project"
    (project / "patches").mkdir(parents=True)
    (project / "serve_decode.sh").write_text("#!/bin/sh\nSPEC=${SPEC:-1}\n")
    (project / "patches" / "model.py").write_text("import os\nX = os.environ.get('G', '1')\n")
    (project / "patches" / "guard.py").write_text("class DecodeGuard:\n    pass\n")
    spec = {
        "files": [
            {"src": "serve_decode.sh", "dest": "/opt/app/serve_decode.sh"},
            {"src": "patches", "dest": "/opt/app/patches"},
        ],
        "expect": {
            "defaults": {"SPEC": {"decode": "1"}},
            "gates": [{"file": "/opt/app/patches/model.py", "name": "G", "default": "1"}],
            "markers": [{"file": "/opt/app/patches/guard.py", "contains": "DecodeGuard"}],
        },
    }
    (project / "kit.yaml").write_text(yaml.safe_dump(spec))
    git(project, "init", "-q")
    git(project, "add", ".")
    git(project, "commit", "-qm", "kit")
    req = KitBuildOptions(
        base=str(base),
        payload=project / "kit.yaml",
        out=tmp_path / "py.tar.zst",
        repo=project,
        engine=(f"vllm={engine}",),
    )
    return build_kit(req)


def rootfs(result: BuildResult, base: Path, tmp_path: Path) -> Path:
    """The rebuilt image unpacked by umoci, with the kit folder copied to /kit."""
    image = tmp_path / "rebuilt"
    assert rebuild_kit(
        KitRebuildOptions(kit=result.archive, base=str(base), out=image, tag="v1")
    ).ok
    bundle = tmp_path / "bundle"
    subprocess.run(
        ["umoci", "unpack", "--image", f"{image}:v1", str(bundle)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    kit = unpack(result.archive, tmp_path / "kit-unpacked", Limits())
    shutil.copytree(kit, bundle / "rootfs" / "kit")
    return bundle / "rootfs"


def selftest(root: Path, nonce: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            shutil.which("chroot") or "/usr/sbin/chroot",
            str(root),
            "/bin/sh",
            "/kit/selftest.sh",
            "image",
            *([nonce] if nonce else []),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
        check=False,
    )


def test_l1_and_l2_pass_in_the_rebuilt_image_and_feed_the_smoke_row(
    python_base: Path, tmp_path: Path
) -> None:
    need_root_and_umoci()
    result = build(tmp_path, python_base)
    nonce = issue_nonce(tmp_path)
    done = selftest(rootfs(result, python_base, tmp_path), nonce)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"selftest kit py image {result.manifest.image.image_id}"
    assert lines[1].startswith(f"selftest proof {nonce} sha256:")
    assert "L1 payload sha256: 3/3 ok" in lines
    assert "L2 py_compile: 2/2 ok" in lines
    assert f"L2 import vllm: {ENGINE} ok (stamp {ENGINE})" in lines
    assert lines[-1] == "selftest: ok"
    log = tmp_path / "smoke.txt"
    log.write_text(done.stdout)
    options = KitVerifyOptions(
        archive=result.archive, smoke=log, base=str(python_base), nonce=tmp_path / NONCE_FILE
    )
    smoke = verify_kit(options).get("smoke")
    assert smoke is not None and smoke.status == "pass" and smoke.ratio == "7/7", smoke
    assert smoke.items[0] == (
        f"proof OK: ran in {result.manifest.image.image_id} (the kit rebuilt onto {python_base})"
    )


def _smoke(result: BuildResult, log: Path, base: Path, nonce: Path | None) -> list[str]:
    row = verify_kit(
        KitVerifyOptions(archive=result.archive, smoke=log, base=str(base), nonce=nonce)
    ).get("smoke")
    assert row is not None and row.status == "fail", row
    return row.problems


def test_the_proof_refuses_an_old_log_a_run_outside_the_image_and_a_written_log(
    python_base: Path, tmp_path: Path
) -> None:
    need_root_and_umoci()
    result = build(tmp_path, python_base)
    root = rootfs(result, python_base, tmp_path)
    (tmp_path / "earlier").mkdir()
    earlier = selftest(root, issue_nonce(tmp_path / "earlier"))
    assert earlier.returncode == 0, earlier.stdout + earlier.stderr
    nonce = issue_nonce(tmp_path)
    nonce_file = tmp_path / NONCE_FILE
    log = tmp_path / "smoke.txt"
    # An earlier run's log: everything ok, but it answers the nonce of that run.
    log.write_text(earlier.stdout)
    assert "a log from an earlier run" in _smoke(result, log, python_base, nonce_file)[0]
    # Outside the image: the same script with this run's nonce, in a root filesystem
    # that is not the rebuilt image (its /etc/os-release differs; L1/L2 still pass,
    # so only the proof can tell).
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc" / "os-release").write_text("ID=elsewhere\n")
    outside = selftest(root, nonce)
    assert f"selftest proof {nonce} sha256:" in outside.stdout
    log.write_text(outside.stdout)
    assert "did not run inside this image" in _smoke(result, log, python_base, nonce_file)[0]
    # Hand-written: the good lines with this run's nonce and a made-up digest.
    written = earlier.stdout.splitlines()
    written[1] = f"selftest proof {nonce} sha256:" + "1" * 64
    log.write_text("\n".join(written) + "\n")
    assert "did not run inside this image" in _smoke(result, log, python_base, nonce_file)[0]
    # Without the proof line, without a nonce, without the rebuilt image: each says so.
    log.write_text("\n".join(written[:1] + written[2:]) + "\n")
    assert "no proof line" in _smoke(result, log, python_base, nonce_file)[0]
    assert "no nonce was issued" in _smoke(result, log, python_base, None)[0]
    row = verify_kit(KitVerifyOptions(archive=result.archive, smoke=log, nonce=nonce_file)).get(
        "smoke"
    )
    assert row is not None and "give --base" in row.problems[0]


def test_the_release_table_shows_every_seed_row_with_its_counts(
    python_base: Path, tmp_path: Path
) -> None:
    need_root_and_umoci()
    result = build(tmp_path, python_base)
    assert result.manifest.code is not None
    first = KitVerifyOptions(archive=result.archive, out=tmp_path / "issued", base=str(python_base))
    table, _ = verify_release(first)
    smoke_row = {r.item: r for r in table.rows}["smoke L1/L2"]
    assert smoke_row.status == "not run" and "smoke-nonce.txt" in smoke_row.result
    nonce = read_nonce(tmp_path / "issued" / NONCE_FILE)
    log = tmp_path / "smoke.txt"
    log.write_text(selftest(rootfs(result, python_base, tmp_path), nonce).stdout)
    options = KitVerifyOptions(
        archive=result.archive,
        out=tmp_path / "evidence",
        repo=tmp_path / "project",
        base=str(python_base),
        smoke=log,
        nonce=tmp_path / "issued" / NONCE_FILE,
        baseline=result.manifest.code.repo_rev,
    )
    table, report = verify_release(options)
    assert report.ok and table.ok and table.complete, table
    assert not (tmp_path / "evidence" / NONCE_FILE).exists()
    assert [(r.item, r.ratio) for r in table.rows] == [
        ("kit integrity", "9/9"),
        ("consistency (source = payload)", "3/3"),
        ("rebuild", "4/4"),
        ("smoke L1/L2", "7/7"),
        ("defaults spot-check", "3/3"),
        ("repo_rev vs release baseline", "1/1"),
    ]
    markdown = (tmp_path / "evidence" / "kit-table.md").read_text()
    assert "| smoke L1/L2 | ✅ pass | 7/7 |" in markdown and "[smoke.txt](smoke.txt)" in markdown


def test_a_changed_payload_file_and_a_wrong_engine_fail_l1_and_l2(
    python_base: Path, tmp_path: Path
) -> None:
    need_root_and_umoci()
    result = build(tmp_path, python_base, engine="0.28.0")
    root = rootfs(result, python_base, tmp_path)
    (root / "opt/app/patches/model.py").write_text("def broken(:\n")
    done = selftest(root)
    assert done.returncode == 1
    assert "L1 FAILED /opt/app/patches/model.py" in done.stdout
    assert "L1 payload sha256: 2/3 FAILED" in done.stdout
    assert "L2 py_compile: 1/2 FAILED" in done.stdout
    assert f"L2 import vllm: {ENGINE} FAILED (stamp 0.28.0)" in done.stdout
    log = tmp_path / "smoke.txt"
    log.write_text(done.stdout)
    smoke = verify_kit(KitVerifyOptions(archive=result.archive, smoke=log)).get("smoke")
    assert smoke is not None and smoke.status == "fail"
    assert any("import vllm" in p for p in smoke.problems)


def test_a_log_from_another_image_does_not_count(python_base: Path, tmp_path: Path) -> None:
    result = build(tmp_path, python_base)
    log = tmp_path / "smoke.txt"
    log.write_text(
        "selftest kit py image sha256:" + "0" * 64 + "\n"
        "L1 payload sha256: 3/3 ok\nL2 py_compile: 2/2 ok\n"
        f"L2 import vllm: {ENGINE} ok (stamp {ENGINE})\nselftest: ok\n"
    )
    smoke = verify_kit(KitVerifyOptions(archive=result.archive, smoke=log)).get("smoke")
    assert smoke is not None and smoke.status == "fail"
    assert "not this kit's" in smoke.detail
