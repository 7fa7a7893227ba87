"""Generated kit files: README, Dockerfile, rebuild.sh, selftest.sh say what MANIFEST says."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.api import isort_order

import servekit.kit
from servekit.kit.build import BuildResult, build_kit
from servekit.kit.kitdir import open_kit
from servekit.kit.models import KitManifest
from servekit.kit.options import KitBuildOptions, KitVerifyOptions
from servekit.kit.render import render_all
from servekit.kit.streams import Limits

from .imagegen import base_layers, config_for, source_layers, write_oci


def test_dockerfile_replays_layers_whiteouts_and_config_delta(tmp_path: Path) -> None:
    layers = source_layers()
    config = config_for(
        layers,
        env=["PATH=/usr/bin:/bin", 'GREETING=say "hi"'],
        Labels={"org.example.rev": "7497a06+0dirty"},
        Entrypoint=["/opt/app/serve.sh"],
        WorkingDir="/opt/app",
    )
    base = write_oci(tmp_path / "b", base_layers())
    src = write_oci(tmp_path / "s", layers, config=config)
    result = build_kit(
        KitBuildOptions(
            base=str(base), source=str(src), out=tmp_path / "k.tar.zst", base_ref="quay.io/x/base:1"
        )
    )
    text = render_all(result.manifest)["Dockerfile"]
    layer = result.manifest.layers[0]
    assert "FROM quay.io/x/base:1" in text
    assert f"ADD {layer.file} /" in text
    assert "RUN rm -rf /etc/old.conf && find /var/cache -mindepth 1 -delete" in text
    assert "RUN rm -f /etc/.wh.old.conf /var/cache/.wh..wh..opq" in text
    assert 'ENV GREETING="say \\"hi\\""' in text
    assert 'LABEL "org.example.rev"="7497a06+0dirty"' in text
    assert 'ENTRYPOINT ["/opt/app/serve.sh"]' in text and "WORKDIR /opt/app" in text
    assert "CMD" not in text.split("FROM", 1)[1]  # Cmd did not change
    readme = render_all(result.manifest)["README.md"]
    assert '`GREETING=say "hi"`' in readme and result.manifest.image.image_id in readme


def test_shipped_files_are_the_rendered_files(tmp_path: Path, images: dict[str, Path]) -> None:
    result = build_kit(
        KitBuildOptions(
            base=str(images["base_oci"]), source=str(images["src_oci"]), out=tmp_path / "k.tar.zst"
        )
    )
    with open_kit(result.archive, Limits()) as kit:
        for name, text in render_all(result.manifest).items():
            assert kit.member(name).read_text() == text
        assert kit.member("rebuild.sh").read_text().startswith("#!/usr/bin/env bash\n")


def test_public_api_is_sorted_and_importable() -> None:
    assert servekit.kit.__all__ == isort_order(servekit.kit.__all__)
    for name in servekit.kit.__all__:
        assert getattr(servekit.kit, name) is not None


def test_a_schema_1_kit_keeps_the_files_it_was_written_with(
    kit: BuildResult, tmp_path: Path
) -> None:
    """A kit built before promises (MANIFEST schema 1) still passes verify's generated check."""
    import json

    from servekit.kit.verify import verify_kit

    from .kitedit import edit_kit

    def to_v1(root: Path) -> None:
        data = json.loads((root / "MANIFEST.json").read_text())
        data["schema_version"] = 1
        for key in ("expect",):
            data.pop(key)
        for item in data["payload"]:
            item.pop("source")
        (root / "MANIFEST.json").write_text(json.dumps(data, indent=2) + "\n")
        for name, text in render_all(KitManifest.model_validate(data)).items():
            (root / name).write_text(text)

    old = edit_kit(kit.archive, tmp_path / "v1.tar.zst", to_v1)
    root_text = render_all(kit.manifest.model_copy(update={"schema_version": 1}))
    assert "## Promises" not in root_text["README.md"]
    assert root_text["selftest.sh"].startswith("#!/usr/bin/env bash")
    report = verify_kit(KitVerifyOptions(archive=old))
    assert report.ok, report.checks


def test_a_schema_2_kit_keeps_its_selftest_without_the_proof(
    kit: BuildResult, tmp_path: Path
) -> None:
    """A kit built before the smoke proof (schema 2) still passes verify's generated check."""
    import json

    from servekit.kit.verify import verify_kit

    from .kitedit import edit_kit

    def to_v2(root: Path) -> None:
        data = json.loads((root / "MANIFEST.json").read_text())
        data["schema_version"] = 2
        (root / "MANIFEST.json").write_text(json.dumps(data, indent=2) + "\n")
        for name, text in render_all(KitManifest.model_validate(data)).items():
            (root / name).write_text(text)

    old = edit_kit(kit.archive, tmp_path / "v2.tar.zst", to_v2)
    two = render_all(kit.manifest.model_copy(update={"schema_version": 2}))
    three = render_all(kit.manifest)
    assert "selftest proof" not in two["selftest.sh"] and "selftest proof" in three["selftest.sh"]
    assert "smoke-nonce.txt" not in two["README.md"] and "smoke-nonce.txt" in three["README.md"]
    report = verify_kit(KitVerifyOptions(archive=old))
    assert report.ok, report.checks
