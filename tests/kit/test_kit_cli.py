"""The kit commands end to end through the real console entry (exit codes 0/1/2)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.cli import servekit_cli, servekit_inproc

from servekit.defaults import script_defaults

from .imagegen import M, base_layers, layer_tar, write_docker_archive, write_oci


def test_build_verify_rebuild_inspect(tmp_path: Path) -> None:
    table = script_defaults("vllm-ascend", "mixed")
    script = "#!/bin/bash\n" + "".join(f"{k}=${{{k}:-{v}}}\n" for k, v in table.items())
    layers = base_layers()
    working = layer_tar([M("opt", "d", mode=0o755), M("opt/serve.sh", "f", script.encode(), 0o755)])
    base = write_docker_archive(tmp_path / "base.tar", layers)
    src = write_oci(tmp_path / "src", [*layers, working])
    kit = tmp_path / "demo-v1.tar.zst"

    built = servekit_inproc(
        "kit", "build", "--base", str(base), "--source", str(src), "--out", str(kit)
    )
    assert built.returncode == 0, built.stdout
    assert "1 working layer(s)" in built.stdout

    verified = servekit_inproc("kit", "verify", str(kit), "--json", "--kind", "vllm-ascend")
    assert verified.returncode == 0, verified.stdout
    report = json.loads(verified.stdout)
    assert {c["name"]: c["status"] for c in report["checks"]}["table"] == "pass"

    table_out = servekit_inproc("kit", "verify", str(kit))
    assert table_out.returncode == 0 and "PASS" in table_out.stdout

    rebuilt = servekit_inproc(
        "kit", "rebuild", str(kit), "--base", str(base), "--out", str(tmp_path / "o")
    )
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert "0 differences" in rebuilt.stdout

    shown = servekit_inproc("kit", "inspect", str(kit), "--json")
    assert json.loads(shown.stdout)["name"] == "demo-v1"
    shown_table = servekit_inproc("kit", "inspect", str(kit)).stdout
    assert "/opt/serve.sh" in shown_table and "none declared" in shown_table
    image = json.loads(servekit_inproc("kit", "inspect", str(tmp_path / "o"), "--json").stdout)
    assert image["format"] == "oci" and len(image["layers"]) == 3
    fs = servekit_inproc("kit", "inspect", str(tmp_path / "o"), "--fs").stdout.splitlines()
    assert any(line.split("\t")[5] == "/opt/serve.sh" for line in fs)


def test_failed_check_exits_1(tmp_path: Path) -> None:
    layers = base_layers()
    bad = layer_tar([M("opt", "d", mode=0o755), M("opt/x.py", "f", b"def (:\n")])
    base = write_oci(tmp_path / "b", layers)
    src = write_oci(tmp_path / "s", [*layers, bad])
    kit = tmp_path / "k.tar.zst"
    assert (
        servekit_cli(
            "kit", "build", "--base", str(base), "--source", str(src), "--out", str(kit)
        ).returncode
        == 0
    )
    result = servekit_cli("kit", "verify", str(kit))
    assert result.returncode == 1
    assert "FAIL" in result.stdout and "compile" in result.stdout


def test_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    result = servekit_cli(
        "kit",
        "build",
        "--base",
        str(tmp_path / "nope"),
        "--source",
        "x",
        "--out",
        str(tmp_path / "k.tar.zst"),
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1
    engine = servekit_cli(
        "kit",
        "build",
        "--base",
        "b",
        "--source",
        "s",
        "--out",
        str(tmp_path / "k.tar.zst"),
        "--engine",
        "novalue",
    )
    assert engine.returncode == 2 and "--engine" in engine.stderr


def test_rebuild_onto_the_wrong_base_exits_2_naming_the_layer(tmp_path: Path) -> None:
    layers = base_layers()
    base = write_oci(tmp_path / "b", layers)
    src = write_oci(tmp_path / "s", [*layers, layer_tar([M("y", "f", b"y")])])
    kit = tmp_path / "k.tar.zst"
    servekit_inproc("kit", "build", "--base", str(base), "--source", str(src), "--out", str(kit))
    wrong = write_oci(tmp_path / "w", [layers[0], layer_tar([M("z", "f", b"z")])])
    result = servekit_cli(
        "kit", "rebuild", str(kit), "--base", str(wrong), "--out", str(tmp_path / "o")
    )
    assert result.returncode == 2
    assert "layer 2" in result.stderr


def test_inspect_fs_of_an_unpacked_rootfs_folder(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "hosts").write_text("127.0.0.1 localhost\n")
    (root / "proc" / "1").mkdir(parents=True)
    result = servekit_inproc("kit", "inspect", str(root), "--fs", "--exclude", "/proc")
    assert result.returncode == 0, result.stderr
    paths = [line.split("\t")[5] for line in result.stdout.splitlines()]
    assert paths == ["/etc", "/etc/hosts"]
    plain = servekit_inproc("kit", "inspect", str(root))
    assert plain.returncode == 2 and "--fs" in plain.stderr


def test_limits_from_the_command_line_refuse_a_large_kit(tmp_path: Path) -> None:
    layers = base_layers()
    base = write_oci(tmp_path / "b", layers)
    src = write_oci(tmp_path / "s", [*layers, layer_tar([M("z", "f", b"\0" * (2 << 20))])])
    kit = tmp_path / "k.tar.zst"
    assert (
        servekit_inproc(
            "kit", "build", "--base", str(base), "--source", str(src), "--out", str(kit)
        ).returncode
        == 0
    )
    small = servekit_inproc("kit", "verify", str(kit), "--max-size", "100000", "--json")
    assert small.returncode == 1
    archive = {c["name"]: c for c in json.loads(small.stdout)["checks"]}["archive"]
    assert archive["status"] == "fail" and "expands past 100000 bytes" in archive["detail"]
    refused = servekit_cli(
        "kit",
        "rebuild",
        str(kit),
        "--base",
        str(base),
        "--out",
        str(tmp_path / "o"),
        "--max-size",
        "100000",
    )
    assert refused.returncode == 2 and "--max-size" in refused.stderr


def test_verify_role_needs_kind_and_a_known_role(tmp_path: Path) -> None:
    kit = tmp_path / "k.tar.zst"
    kit.write_bytes(b"x")
    alone = servekit_inproc("kit", "verify", str(kit), "--role", "decode")
    assert alone.returncode == 2 and "--kind" in alone.stderr
    odd = servekit_inproc("kit", "verify", str(kit), "--kind", "vllm", "--role", "primary")
    assert odd.returncode == 2 and "decode, prefill or mixed" in odd.stderr
    unknown = servekit_inproc("kit", "verify", str(kit), "--kind", "trt")
    assert unknown.returncode == 2 and "--kind 'trt'" in unknown.stderr


def test_verify_family_compares_with_that_family_row_only(tmp_path: Path) -> None:
    from servekit.catalog.families import family_script_defaults

    family = family_script_defaults("a3/dsv4-flash-a3-pd", "decode")
    assert family["PREFIX"] == "0"  # the verified source runs --no-enable-prefix-caching
    script = "#!/bin/bash\n" + "".join(f"{k}=${{{k}:-{v}}}\n" for k, v in family.items())
    layers = base_layers()
    working = layer_tar(
        [M("opt", "d", mode=0o755), M("opt/run_decode.sh", "f", script.encode(), 0o755)]
    )
    base = write_docker_archive(tmp_path / "base.tar", layers)
    src = write_oci(tmp_path / "src", [*layers, working])
    kit = tmp_path / "a3-v1.tar.zst"
    built = servekit_inproc(
        "kit", "build", "--base", str(base), "--source", str(src), "--out", str(kit)
    )
    assert built.returncode == 0, built.stdout

    def table_row(*flags: str) -> dict[str, str]:
        done = servekit_inproc("kit", "verify", str(kit), "--json", *flags)
        rows = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
        return rows["table"]

    assert table_row("--family", "a3/dsv4-flash-a3-pd")["status"] == "pass"
    generic = table_row("--kind", "vllm-ascend")
    assert generic["status"] == "fail" and "PREFIX defaults to '0'" in generic["detail"]

    unknown = servekit_inproc("kit", "verify", str(kit), "--family", "a3/nope")
    assert unknown.returncode == 2 and "--family 'a3/nope'" in unknown.stderr
    hostile = servekit_inproc("kit", "verify", str(kit), "--family", "$(touch /tmp/x)")
    assert hostile.returncode == 2 and "--family" in hostile.stderr
    with_role = servekit_inproc(
        "kit", "verify", str(kit), "--role", "decode", "--family", "a3/nope"
    )
    assert with_role.returncode == 2 and "--family 'a3/nope'" in with_role.stderr
    alone = servekit_inproc("kit", "verify", str(kit), "--catalog", "layouts")
    assert alone.returncode == 2 and "--catalog applies to --family" in alone.stderr
    missing = servekit_inproc(
        "kit", "verify", str(kit), "--family", "a3/x", "--catalog", "/nonexistent"
    )
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
