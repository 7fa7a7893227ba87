"""The kit commands' tables read whole in an 80-column terminal (nothing cut to ``…``)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.cli import servekit_inproc

from .imagegen import M, base_layers, layer_tar, write_docker_archive, write_oci

DEEP = "opt/" + "/".join(f"folder-with-a-long-name-{i}" for i in range(4)) + "/serve.sh"


def shown(*args: str) -> str:
    result = servekit_inproc(*args, env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "…" not in out, out
    return out


def test_inspect_verify_and_rebuild_fit_80_columns(tmp_path: Path) -> None:
    folders = [M("/".join(DEEP.split("/")[: i + 1]), "d", mode=0o755) for i in range(5)]
    working = layer_tar([*folders, M(DEEP, "f", b"#!/bin/sh\n", 0o755)])
    base = write_docker_archive(tmp_path / "base.tar", base_layers())
    src = write_oci(tmp_path / "src", [*base_layers(), working])
    kit = tmp_path / "demo-v1.tar.zst"
    build = ["kit", "build", "--base", str(base), "--source", str(src), "--out", str(kit)]
    assert servekit_inproc(*build).returncode == 0
    inspected = shown("kit", "inspect", str(kit))
    assert "/opt/folder-with-a-long-name-0" in inspected and "serve.sh" in inspected
    assert "PASS" in shown("kit", "verify", str(kit))
    shown("kit", "rebuild", str(kit), "--base", str(base), "--out", str(tmp_path / "o"))
    layers = shown("kit", "inspect", str(tmp_path / "o"))
    assert "sha256:" in layers
