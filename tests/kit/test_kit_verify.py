"""kit verify: every check passes on a good kit and catches its own kind of damage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servekit.defaults import script_defaults
from servekit.kit.build import BuildResult, build_kit
from servekit.kit.checks import CheckReport
from servekit.kit.options import KitBuildOptions, KitVerifyOptions
from servekit.kit.verify import verify_kit

from .imagegen import M, base_layers, layer_tar, write_oci
from .kitedit import edit_kit


def status(report: CheckReport) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


def defaults_script(values: dict[str, str]) -> bytes:
    body = "".join(f"{name}=${{{name}:-{value}}}\n" for name, value in values.items())
    return ("#!/usr/bin/env bash\nset -euo pipefail\n" + body + 'echo "$GPU_UTIL"\n').encode()


def kit_with(tmp_path: Path, files: list[M], name: str = "v.tar.zst") -> BuildResult:
    layers = base_layers()
    base = write_oci(tmp_path / f"{name}-base", layers)
    working = [M("opt", "d", mode=0o755), M("opt/app", "d", mode=0o755), *files]
    src = write_oci(tmp_path / f"{name}-src", [*layers, layer_tar(working)])
    return build_kit(KitBuildOptions(base=str(base), source=str(src), out=tmp_path / name))


KIND = {"kind": "vllm-ascend"}


def test_good_kit_passes_every_check(tmp_path: Path) -> None:
    table = script_defaults("vllm-ascend", "mixed")
    result = kit_with(
        tmp_path,
        [
            M("opt/app/serve.sh", "f", defaults_script(table), 0o755),
            M("opt/app/patch.py", "f", b"import os\nVALUE = 1\n"),
        ],
    )
    report = verify_kit(KitVerifyOptions(archive=result.archive, **KIND))
    assert report.ok, report.checks
    assert set(status(report).values()) == {"pass", "skip"}
    assert [c.name for c in report.checks if c.status == "skip"] == ["expect"]
    assert "equal servekit's table" in next(c.detail for c in report.checks if c.name == "table")


def test_without_kind_servekits_table_is_not_consulted(tmp_path: Path) -> None:
    table = dict(script_defaults("vllm-ascend", "mixed"))
    table[sorted(table)[0]] += "7"
    result = kit_with(tmp_path, [M("opt/app/serve.sh", "f", defaults_script(table), 0o755)])
    report = verify_kit(KitVerifyOptions(archive=result.archive))
    assert report.ok and "table" not in status(report)
    assert status(report)["expect"] == "skip"


def test_script_default_that_disagrees_with_the_table_fails(tmp_path: Path) -> None:
    table = dict(script_defaults("vllm-ascend", "mixed"))
    name = sorted(table)[0]
    table[name] = table[name] + "7"
    result = kit_with(tmp_path, [M("opt/app/serve.sh", "f", defaults_script(table), 0o755)])
    report = verify_kit(KitVerifyOptions(archive=result.archive, **KIND))
    assert not report.ok
    detail = next(c.detail for c in report.checks if c.name == "table")
    assert f"{name} defaults to" in detail and "/opt/app/serve.sh:" in detail


def test_decode_scripts_are_checked_against_the_decode_column(tmp_path: Path) -> None:
    decode = script_defaults("vllm-ascend", "decode")
    mixed = script_defaults("vllm-ascend", "mixed")
    assert decode != mixed  # the guard differs by role
    result = kit_with(tmp_path, [M("opt/app/serve_decode.sh", "f", defaults_script(decode), 0o755)])
    assert status(verify_kit(KitVerifyOptions(archive=result.archive, **KIND)))["table"] == "pass"
    forced = verify_kit(KitVerifyOptions(archive=result.archive, kind="vllm-ascend", role="mixed"))
    assert status(forced)["table"] == "fail"


def test_python_payload_that_does_not_compile_fails_and_is_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    evil = f"open({str(marker)!r}, 'w').write('x')\ndef broken(:\n".encode()
    ok_but_evil = f"open({str(marker)!r}, 'w').write('x')\n".encode()
    result = kit_with(
        tmp_path, [M("opt/app/bad.py", "f", evil), M("opt/app/evil.py", "f", ok_but_evil)]
    )
    report = verify_kit(KitVerifyOptions(archive=result.archive))
    assert status(report)["compile"] == "fail"
    assert "/opt/app/bad.py" in next(c.detail for c in report.checks if c.name == "compile")
    assert not marker.exists()


def test_sidecar_mismatch_and_missing_sidecar_fail(kit: BuildResult) -> None:
    side = kit.archive.with_name(kit.archive.name + ".sha256")
    side.write_text("0" * 64 + "  k1.tar.zst\n")
    assert status(verify_kit(KitVerifyOptions(archive=kit.archive)))["sidecar"] == "fail"
    side.unlink()
    report = verify_kit(KitVerifyOptions(archive=kit.archive))
    assert status(report)["sidecar"] == "fail" and "missing" in report.checks[0].detail


def test_member_changed_without_resumming_fails_members(kit: BuildResult, tmp_path: Path) -> None:
    def change(root: Path) -> None:
        (root / "README.md").write_text("changed\n")

    out = edit_kit(kit.archive, tmp_path / "t.tar.zst", change, sums=False)
    report = verify_kit(KitVerifyOptions(archive=out))
    assert status(report)["sidecar"] == "pass"
    assert status(report)["members"] == "fail"
    assert status(report)["generated"] == "fail"


def test_extra_member_not_in_sums_fails(kit: BuildResult, tmp_path: Path) -> None:
    def change(root: Path) -> None:
        (root / "extra.txt").write_text("x")

    out = edit_kit(kit.archive, tmp_path / "t.tar.zst", change, sums=False)
    detail = next(
        c.detail for c in verify_kit(KitVerifyOptions(archive=out)).checks if c.name == "members"
    )
    assert "extra.txt: not listed" in detail


def test_tampered_layer_fails_layers_and_payload_even_with_fresh_sums(
    kit: BuildResult, tmp_path: Path
) -> None:
    def change(root: Path) -> None:
        layer = next((root / "layers").iterdir())
        data = layer.read_bytes()
        layer.write_bytes(data.replace(b"fresh\n", b"FRESH\n"))

    out = edit_kit(kit.archive, tmp_path / "t.tar.zst", change)
    report = verify_kit(KitVerifyOptions(archive=out))
    assert status(report)["members"] == "pass"
    assert status(report)["layers"] == "fail"
    assert status(report)["payload"] == "fail"


def test_manifest_with_an_unknown_field_is_refused(kit: BuildResult, tmp_path: Path) -> None:
    def change(root: Path) -> None:
        data = json.loads((root / "MANIFEST.json").read_text())
        data["surprise"] = 1
        (root / "MANIFEST.json").write_text(json.dumps(data))

    report = verify_kit(
        KitVerifyOptions(archive=edit_kit(kit.archive, tmp_path / "t.tar.zst", change))
    )
    assert status(report)["manifest"] == "fail"
    assert not report.ok


def test_config_that_does_not_match_the_image_id_fails(kit: BuildResult, tmp_path: Path) -> None:
    def change(root: Path) -> None:
        (root / "config.json").write_bytes((root / "config.json").read_bytes() + b" ")

    report = verify_kit(
        KitVerifyOptions(archive=edit_kit(kit.archive, tmp_path / "t.tar.zst", change))
    )
    assert status(report)["config"] == "fail"


def test_unpacked_folder_verifies_with_sidecar_skipped(kit: BuildResult, tmp_path: Path) -> None:
    from servekit.kit.kitarchive import unpack
    from servekit.kit.streams import Limits

    root = unpack(kit.archive, tmp_path / "x", Limits())
    report = verify_kit(KitVerifyOptions(archive=root))
    assert status(report)["sidecar"] == "skip"
    assert status(report)["members"] == "pass"


def test_missing_defaults_table_is_a_failed_check_not_a_crash(kit: BuildResult) -> None:
    def broken(role: str) -> dict[str, str]:
        from servekit.errors import UsageError

        raise UsageError("no table")

    report = verify_kit(KitVerifyOptions(archive=kit.archive), table=broken)
    assert status(report)["table"] == "fail"


@pytest.mark.parametrize("kind", ["vllm", "vllm-cpu"])
def test_kind_selects_the_table_column(tmp_path: Path, kind: str) -> None:
    table = script_defaults(kind, "mixed")  # type: ignore[arg-type]
    result = kit_with(tmp_path, [M("opt/app/run.sh", "f", defaults_script(table), 0o755)])
    assert (
        status(verify_kit(KitVerifyOptions(archive=result.archive, kind=kind)))["table"] == "pass"
    )


def test_python_file_too_large_to_hold_fails_compile_instead_of_being_skipped(
    tmp_path: Path,
) -> None:
    big = b"X = 1\n" * (3 << 20)  # 18 MiB
    result = kit_with(tmp_path, [M("opt/app/huge.py", "f", big)])
    report = verify_kit(KitVerifyOptions(archive=result.archive))
    detail = next(c.detail for c in report.checks if c.name == "compile")
    assert status(report)["compile"] == "fail" and "huge.py: too large" in detail


def test_shebang_scripts_without_sh_suffix_are_checked_for_defaults(tmp_path: Path) -> None:
    table = dict(script_defaults("vllm-ascend", "mixed"))
    name = sorted(table)[0]
    table[name] += "9"
    result = kit_with(tmp_path, [M("opt/app/launch", "f", defaults_script(table), 0o755)])
    assert status(verify_kit(KitVerifyOptions(archive=result.archive, **KIND)))["table"] == "fail"
