"""servekit verify NAME --kit KIT: the kit package's release table in the verify report.

Each seed row (consistency, rebuild, smoke, defaults spot-check, repo_rev) with
its N/N and a link to its evidence file in the run folder; rows whose input
was not given say how to run them; a failed row fails the run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.helpers.gitrepo import git
from tests.kit.imagegen import base_layers, write_oci

from servekit.kit.build import build_kit
from servekit.kit.options import KitBuildOptions
from servekit.verify import adapters
from servekit.verify.run import VerifyOptions, verify

from .support import SimRunner, components


def make_kit(tmp_path: Path, spec_default: str) -> tuple[Path, Path, Path]:
    """(kit archive, its repository, its base image): scripts promising SPEC=1."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / "serve_decode.sh").write_text(
        f"#!/bin/sh\nSPEC=${{SPEC:-{spec_default}}}\n"
    )
    spec = {
        "files": [{"src": "scripts", "dest": "/opt/app/scripts"}],
        "expect": {"defaults": {"SPEC": "1"}},
    }
    (repo / "kit.yaml").write_text(yaml.safe_dump(spec))
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "one")
    base = write_oci(tmp_path / "base", base_layers())
    req = KitBuildOptions(
        base=str(base), payload=repo / "kit.yaml", out=tmp_path / "k.tar.zst", repo=repo
    )
    return build_kit(req).archive, repo, base


def opts(catalog: Path, out: Path, **kw: object) -> VerifyOptions:
    given = {"name": "local/1p1d", "engine": "sim", "out": out, "catalog": str(catalog), **kw}
    return VerifyOptions.model_validate(given)


@pytest.mark.slow
def test_the_kit_release_table_is_in_the_report_with_its_evidence(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    archive, repo, base = make_kit(tmp_path, "1")
    given = opts(catalog, tmp_path / "run", kit=archive, kit_repo=repo, kit_base=str(base))
    out = verify(given, components(runner, kit=adapters.kit))
    assert out.exit_code == 0, [s for s in out.run.steps if s.status != "ok"]
    md = out.report_md.read_text()
    table = md.split("### Kit release table", 1)[1].split("\n### ", 1)[0]
    rows = {
        line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")
    }
    assert "2/2" not in rows["consistency (source = payload)"]
    assert "1/1" in rows["consistency (source = payload)"]
    assert "✅ pass" in rows["rebuild"] and "(kit/rebuild.json)" in rows["rebuild"]
    assert (
        "1/1" in rows["defaults spot-check"] and "(kit/expect.json)" in rows["defaults spot-check"]
    )
    assert "not run" in rows["smoke L1/L2"] and "--smoke" in rows["smoke L1/L2"]
    for href in (
        "kit/kit-table.json",
        "kit/consistency.json",
        "kit/rebuild.json",
        "kit/expect.json",
    ):
        assert (out.run_dir / href).is_file(), href
    assert 'id="kit-table"' in out.report_html.read_text()
    assert "release rows not run: smoke L1/L2" in out.run.step("kit").detail  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_broken_promise_fails_the_run_naming_it(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    archive, _, _ = make_kit(tmp_path, "0")
    out = verify(opts(catalog, tmp_path / "run", kit=archive), components(runner, kit=adapters.kit))
    assert out.exit_code == 1
    md = out.report_md.read_text()
    assert "❌ fail" in md.split("### Kit release table", 1)[1]
    assert "SPEC promised '1', found '0'" in md


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"kit_repo": "."}, "give --kit ARCHIVE too"),
        (
            {"kit": "k.tar.zst", "kit_repo": "/nonexistent"},
            "--kit-repo /nonexistent: no such folder",
        ),
    ],
)
def test_kit_row_inputs_are_checked_first(
    catalog: Path, tmp_path: Path, runner: SimRunner, given: dict[str, object], says: str
) -> None:
    from servekit.errors import UsageError

    if "kit" in given:
        (tmp_path / "k.tar.zst").write_bytes(b"x")
        given = {**given, "kit": tmp_path / "k.tar.zst"}
    with pytest.raises(UsageError, match=says):
        verify(opts(catalog, tmp_path / "run", **given), components(runner))
    assert runner.ups == []
