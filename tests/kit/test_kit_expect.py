"""The kit's own promises (``expect:``): defaults by role, gates, markers, checked by verify.

The v2 -> v3 regression of the first seed (decode script defaults SPEC,
DRAFT_GRAPH and STATIC_KERNEL to 0 while the release promises 1) must fail
``kit verify`` naming each variable; the same kit with the scripts fixed passes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from servekit.errors import UsageError
from servekit.kit.build import BuildResult, build_kit
from servekit.kit.checks import CheckReport, CheckResult
from servekit.kit.options import KitBuildOptions, KitVerifyOptions
from servekit.kit.verify import verify_kit

from .imagegen import M, base_layers, layer_tar, write_oci

DECODE_V3 = "#!/bin/bash\nSPEC=${SPEC:-1}\nDRAFT_GRAPH=${DRAFT_GRAPH:-1}\nPREFIX=${PREFIX:-1}\nSTATIC_KERNEL=${STATIC_KERNEL:-1}\n"
DECODE_V2 = "#!/bin/bash\nSPEC=${SPEC:-0}\nDRAFT_GRAPH=${DRAFT_GRAPH:-0}\nPREFIX=${PREFIX:-1}\nSTATIC_KERNEL=${STATIC_KERNEL:-0}\n"
PREFILL = "#!/bin/bash\nPREFIX=${PREFIX:-1}\nSTATIC_KERNEL=${STATIC_KERNEL:-0}\n"
MODEL = 'import os\nGATE = os.environ.get("V41_CED_GRAPH_GATE", "1") == "1"\n'
GUARD = "class DecodeGuard:\n    code = 'decode_requires_remote_prefill'\n"

EXPECT: dict[str, Any] = {
    "defaults": {
        "SPEC": "1",
        "DRAFT_GRAPH": "1",
        "PREFIX": "1",
        "STATIC_KERNEL": {"decode": "1", "prefill": "0"},
    },
    "gates": [{"file": "/opt/app/model.py", "name": "V41_CED_GRAPH_GATE", "default": "1"}],
    "markers": [{"file": "/opt/app/guard.py", "contains": "DecodeGuard"}],
}


def make_kit(
    tmp_path: Path,
    *,
    decode: str = DECODE_V3,
    model: str = MODEL,
    guard: str = GUARD,
    expect: dict[str, Any] | None = EXPECT,
    extra: dict[str, str] | None = None,
) -> BuildResult:
    project = tmp_path / "project"
    project.mkdir()
    files = {
        "serve_decode.sh": decode,
        "serve_prefill.sh": PREFILL,
        "model.py": model,
        "guard.py": guard,
    }
    files |= extra or {}
    for name, text in files.items():
        (project / name).write_text(text)
    spec: dict[str, Any] = {
        "files": [{"src": name, "dest": f"/opt/app/{name}"} for name in files],
    }
    if expect is not None:
        spec["expect"] = expect
    (project / "kit.yaml").write_text(yaml.safe_dump(spec))
    base = write_oci(tmp_path / "base", base_layers())
    return build_kit(
        KitBuildOptions(base=str(base), payload=project / "kit.yaml", out=tmp_path / "k.tar.zst")
    )


def row(report: CheckReport, name: str) -> CheckResult:
    found = report.get(name)
    assert found is not None, [c.name for c in report.checks]
    return found


def test_a_kit_keeping_its_promises_passes_with_counts(tmp_path: Path) -> None:
    result = make_kit(tmp_path)
    assert result.manifest.expect is not None
    report = verify_kit(KitVerifyOptions(archive=result.archive))
    assert report.ok, report.checks
    defaults = row(report, "defaults")
    assert (defaults.passed, defaults.total) == (5, 5)
    assert defaults.detail.startswith("5/5")
    assert row(report, "gates").ratio == "1/1"
    assert row(report, "markers").ratio == "1/1"


def test_the_v2_to_v3_regression_fails_naming_each_variable(tmp_path: Path) -> None:
    report = verify_kit(KitVerifyOptions(archive=make_kit(tmp_path, decode=DECODE_V2).archive))
    assert not report.ok
    defaults = row(report, "defaults")
    assert defaults.status == "fail" and (defaults.passed, defaults.total) == (2, 5)
    for name in ("SPEC", "DRAFT_GRAPH", "STATIC_KERNEL"):
        assert any(
            p.startswith("/opt/app/serve_decode.sh:") and f"{name} promised '1', found '0'" in p
            for p in defaults.problems
        ), defaults.problems
        assert name in defaults.detail
    assert len(defaults.problems) == 3


def test_the_prefill_script_is_held_to_the_prefill_value(tmp_path: Path) -> None:
    expect = {**EXPECT, "defaults": {"STATIC_KERNEL": {"decode": "1", "prefill": "1"}}}
    defaults = row(
        verify_kit(KitVerifyOptions(archive=make_kit(tmp_path, expect=expect).archive)), "defaults"
    )
    assert defaults.status == "fail"
    assert defaults.problems == [
        "/opt/app/serve_prefill.sh:3: STATIC_KERNEL promised '1', found '0'"
    ]


def test_a_promise_no_script_sets_fails(tmp_path: Path) -> None:
    expect = {**EXPECT, "defaults": {"MAX_LEN": "1048576", "SPEC": {"mixed": "1"}}}
    defaults = row(
        verify_kit(KitVerifyOptions(archive=make_kit(tmp_path, expect=expect).archive)), "defaults"
    )
    assert defaults.status == "fail"
    assert "MAX_LEN: promised '1048576', no shipped script sets it" in defaults.problems
    assert "SPEC (mixed): promised '1', no shipped mixed script sets it" in defaults.problems


def test_explicit_roles_override_the_name(tmp_path: Path) -> None:
    expect = {
        "defaults": {"STATIC_KERNEL": {"decode": "1", "prefill": "0"}},
        "roles": {"/opt/app/launch_d.sh": "decode"},
    }
    result = make_kit(
        tmp_path,
        expect=expect,
        extra={"launch_d.sh": "#!/bin/sh\nSTATIC_KERNEL=${STATIC_KERNEL:-1}\n"},
    )
    assert row(verify_kit(KitVerifyOptions(archive=result.archive)), "defaults").status == "pass"


def test_gate_default_that_disagrees_fails_naming_file_variable_and_values(tmp_path: Path) -> None:
    model = 'import os\nX = os.getenv("V41_CED_GRAPH_GATE", default="0")\n'
    gates = row(
        verify_kit(KitVerifyOptions(archive=make_kit(tmp_path, model=model).archive)), "gates"
    )
    assert gates.status == "fail"
    assert gates.problems == ["/opt/app/model.py:2: V41_CED_GRAPH_GATE promised '1', found '0'"]


def test_gate_that_the_file_never_reads_fails(tmp_path: Path) -> None:
    gates = row(
        verify_kit(KitVerifyOptions(archive=make_kit(tmp_path, model="X = 1\n").archive)), "gates"
    )
    assert gates.status == "fail" and "no default for V41_CED_GRAPH_GATE" in gates.detail


def test_missing_marker_fails(tmp_path: Path) -> None:
    markers = row(
        verify_kit(KitVerifyOptions(archive=make_kit(tmp_path, guard="pass\n").archive)), "markers"
    )
    assert markers.status == "fail"
    assert markers.problems == ["/opt/app/guard.py: does not contain 'DecodeGuard'"]


def test_a_kit_without_promises_says_so(tmp_path: Path) -> None:
    report = verify_kit(KitVerifyOptions(archive=make_kit(tmp_path, expect=None).archive))
    expect = row(report, "expect")
    assert expect.status == "skip" and "declares no promises" in expect.detail
    assert report.get("defaults") is None


def test_promises_naming_a_file_the_kit_does_not_ship_are_refused_at_build(
    tmp_path: Path,
) -> None:
    expect = {"markers": [{"file": "/opt/app/nope.py", "contains": "x"}]}
    with pytest.raises(UsageError, match=r"expect: /opt/app/nope.py is not a file this kit ships"):
        make_kit(tmp_path, expect=expect)


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ({"defaults": {"SPEC": True}}, "write True in quotes"),
        ({"defaults": {"SPEC": 0.9}}, "write 0.9 in quotes"),
        ({"defaults": {"BAD NAME": "1"}}, "not a shell variable name"),
        ({"defaults": {"SPEC": {"decoder": "1"}}}, "SPEC: Extra inputs"),
        ({"gates": [{"file": "model.py", "name": "G", "default": "1"}]}, "canonical image path"),
        ({"markers": [{"file": "/opt/app/guard.py", "contains": ""}]}, "at least 1 character"),
        ({"roles": {"/opt/app/serve_decode.sh": "primary"}}, "roles"),
        ({"surprise": 1}, "expect.surprise"),
    ],
)
def test_bad_promises_name_the_field(tmp_path: Path, expect: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match="payload spec") as info:
        make_kit(tmp_path, expect=expect)
    assert message in str(info.value)


def test_yaml_numbers_are_promised_as_text(tmp_path: Path) -> None:
    expect = {"defaults": {"SPEC": 1, "STATIC_KERNEL": {"decode": 1, "prefill": 0}}}
    result = make_kit(tmp_path, expect=expect)
    assert result.manifest.expect is not None
    assert result.manifest.expect.defaults["SPEC"] == "1"
    assert row(verify_kit(KitVerifyOptions(archive=result.archive)), "defaults").ratio == "3/3"


def test_source_image_kits_take_promises_from_expect_file(tmp_path: Path) -> None:
    layers = base_layers()
    working = layer_tar(
        [M("opt", "d", mode=0o755), M("opt/serve_decode.sh", "f", DECODE_V2.encode(), 0o755)]
    )
    base = write_oci(tmp_path / "b", layers)
    src = write_oci(tmp_path / "s", [*layers, working])
    expect_file = tmp_path / "expect.yaml"
    expect_file.write_text(yaml.safe_dump({"expect": {"defaults": {"SPEC": "1"}}}))
    result = build_kit(
        KitBuildOptions(
            base=str(base), source=str(src), out=tmp_path / "s.tar.zst", expect=expect_file
        )
    )
    defaults = row(verify_kit(KitVerifyOptions(archive=result.archive)), "defaults")
    assert defaults.problems == ["/opt/serve_decode.sh:2: SPEC promised '1', found '0'"]


def test_readme_lists_the_promises(tmp_path: Path) -> None:
    from servekit.kit.render import render_all

    result = make_kit(tmp_path)
    readme = render_all(result.manifest)["README.md"]
    assert "- default `STATIC_KERNEL`: decode `1`, prefill `0`" in readme
    assert "- gate `V41_CED_GRAPH_GATE` in `/opt/app/model.py` defaults to `1`" in readme
