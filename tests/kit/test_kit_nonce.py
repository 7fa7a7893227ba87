"""The smoke proof's nonce is issued here, recorded, and answers one log.

The forgery (issue 36, item 9): whoever holds the kit and the base can rebuild
the image, pick a nonce, compute the proof digest from the rebuilt files and
write a log with every line ``ok``, nothing run. Before nonces were recorded that
log passed the smoke row, as often as it was handed in. Here the same computed
log passes once with a nonce ``kit verify --out`` issued (the positive control:
the digest is what ``selftest.sh image`` prints in the image, which
``test_kit_selftest`` checks with a real chroot run), fails the second time, and
fails with a self-chosen nonce.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servekit.kit.build import BuildResult, build_kit
from servekit.kit.checks import CheckResult
from servekit.kit.options import KitBuildOptions, KitVerifyOptions
from servekit.kit.smokeproof import (
    NONCE_FILE,
    expected_proof,
    issue_nonce,
    nonce_ledger,
    redeem_nonce,
    was_issued,
    witnesses,
)
from servekit.kit.verify import run_verify

from .imagegen import M, base_layers, layer_tar, write_oci


@pytest.fixture
def kit(tmp_path: Path) -> tuple[BuildResult, Path]:
    layers = base_layers()
    base = write_oci(tmp_path / "base", layers)
    working = [
        M("opt", "d", mode=0o755),
        M("opt/app", "d", mode=0o755),
        M("opt/app/model.py", "f", b"X = 1\n"),
    ]
    src = write_oci(tmp_path / "src", [*layers, layer_tar(working)])
    out = tmp_path / "k.tar.zst"
    return build_kit(KitBuildOptions(base=str(base), source=str(src), out=out)), base


def _computed_log(result: BuildResult, base: Path, nonce: str) -> str:
    """The log selftest.sh would print, computed from the rebuilt image: nothing runs."""
    m = result.manifest
    rootfs = run_verify(KitVerifyOptions(archive=result.archive, base=str(base))).rootfs
    assert rootfs is not None
    py = sum(p.path.endswith(".py") for p in m.payload)
    return (
        f"selftest kit {m.name} image {m.image.image_id}\n"
        f"selftest proof {nonce} {expected_proof(witnesses(m), rootfs, nonce)}\n"
        f"L1 payload sha256: {len(m.payload)}/{len(m.payload)} ok\n"
        f"L2 py_compile: {py}/{py} ok\n"
        "selftest: ok\n"
    )


def _smoke(result: BuildResult, base: Path, log: Path, nonce_file: Path) -> CheckResult:
    options = KitVerifyOptions(archive=result.archive, base=str(base), smoke=log, nonce=nonce_file)
    row = run_verify(options).report.get("smoke")
    assert row is not None
    return row


def test_a_log_computed_with_a_self_chosen_nonce_fails_the_smoke_row(
    kit: tuple[BuildResult, Path], tmp_path: Path
) -> None:
    result, base = kit
    chosen = "0123456789abcdef" * 2
    nonce_file = tmp_path / "mine.txt"
    nonce_file.write_text(chosen + "\n")
    log = tmp_path / "smoke.txt"
    log.write_text(_computed_log(result, base, chosen))
    for _ in range(2):
        row = _smoke(result, base, log, nonce_file)
        assert row.status == "fail", row
        assert "did not issue" in row.problems[0]


def test_an_issued_nonce_answers_one_log_then_is_used_up(
    kit: tuple[BuildResult, Path], tmp_path: Path
) -> None:
    result, base = kit
    nonce = issue_nonce(tmp_path)
    assert was_issued(nonce) and (nonce_ledger() / nonce).is_file()
    log = tmp_path / "smoke.txt"
    log.write_text(_computed_log(result, base, nonce))
    first = _smoke(result, base, log, tmp_path / NONCE_FILE)
    assert first.status == "pass", first
    assert not was_issued(nonce)
    again = _smoke(result, base, log, tmp_path / NONCE_FILE)
    assert again.status == "fail" and "already answered" in again.problems[0], again


def test_a_failed_proof_keeps_the_nonce_for_the_real_run(
    kit: tuple[BuildResult, Path], tmp_path: Path
) -> None:
    result, base = kit
    nonce = issue_nonce(tmp_path)
    log = tmp_path / "smoke.txt"
    text = _computed_log(result, base, nonce).splitlines()
    text[1] = f"selftest proof {nonce} sha256:" + "1" * 64
    log.write_text("\n".join(text) + "\n")
    row = _smoke(result, base, log, tmp_path / NONCE_FILE)
    assert row.status == "fail" and "did not run inside this image" in row.problems[0]
    assert was_issued(nonce)


def test_redeeming_is_once_and_only_for_nonces() -> None:
    assert not redeem_nonce("../" + "a" * 29) and not redeem_nonce("a" * 32)
    nonce_ledger().mkdir(parents=True)
    (nonce_ledger() / ("b" * 32)).touch()
    assert redeem_nonce("b" * 32) and not redeem_nonce("b" * 32)
