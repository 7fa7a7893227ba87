"""Release rows: source = payload (--repo), repo_rev vs the baseline, rebuild, and the table.

Kits here are built from a payload spec inside a real git repository, with
``--repo``, so each payload file records its repository source.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.helpers.gitrepo import git

from servekit.errors import UsageError
from servekit.kit import (
    KitReleaseTable,
    kit_release_table,
    render_release_table,
    verify_kit,
    verify_release,
)
from servekit.kit.build import BuildResult, build_kit
from servekit.kit.checks import CheckResult
from servekit.kit.options import KitBuildOptions, KitVerifyOptions

from .imagegen import M, base_layers, layer_tar, write_oci


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository holding scripts, a patch and the payload spec, one commit."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "patches").mkdir()
    (root / "scripts" / "serve_decode.sh").write_text("#!/bin/sh\nSPEC=${SPEC:-1}\n")
    (root / "patches" / "model.py").write_text("X = 1\n")
    (root / "notes.txt").write_text("not shipped\n")
    spec = {
        "files": [
            {"src": "scripts", "dest": "/opt/app/scripts"},
            {"src": "patches/model.py", "dest": "/opt/app/model.py"},
        ],
        "expect": {"defaults": {"SPEC": "1"}, "repo_rev": None},
    }
    (root / "kit.yaml").write_text(yaml.safe_dump(spec))
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "one")
    return root


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return write_oci(tmp_path / "base", base_layers())


def build(repo: Path, base: Path, out: Path, **extra: object) -> BuildResult:
    req = KitBuildOptions(
        base=str(base),
        payload=repo / "kit.yaml",
        out=out,
        repo=repo,
        engine=("vllm=0.27.1",),
        **extra,
    )
    return build_kit(req)


def consistency(result: BuildResult, repo: Path) -> CheckResult:
    row = verify_kit(KitVerifyOptions(archive=result.archive, repo=repo)).get("consistency")
    assert row is not None
    return row


def test_payload_files_record_their_repository_source(
    repo: Path, base: Path, tmp_path: Path
) -> None:
    m = build(repo, base, tmp_path / "k.tar.zst").manifest
    assert {p.path: p.source for p in m.payload} == {
        "/opt/app/model.py": "patches/model.py",
        "/opt/app/scripts/serve_decode.sh": "scripts/serve_decode.sh",
    }


def test_source_equals_payload_at_the_stamped_commit(
    repo: Path, base: Path, tmp_path: Path
) -> None:
    row = consistency(build(repo, base, tmp_path / "k.tar.zst"), repo)
    assert row.status == "pass" and row.ratio == "2/2"
    assert "checkout at the stamped commit (clean)" in row.detail
    assert "ok /opt/app/model.py = patches/model.py" in row.items


def test_a_later_or_dirty_checkout_is_reported_and_the_stamped_commit_still_compared(
    repo: Path, base: Path, tmp_path: Path
) -> None:
    result = build(repo, base, tmp_path / "k.tar.zst")
    (repo / "patches" / "model.py").write_text("X = 2\n")
    git(repo, "commit", "-qam", "two")
    (repo / "scripts" / "serve_decode.sh").write_text("#!/bin/sh\nSPEC=${SPEC:-0}\n")
    row = consistency(result, repo)
    assert row.status == "pass" and row.ratio == "2/2"
    assert "not the stamped commit" in row.detail
    assert "1 modified file(s): scripts/serve_decode.sh" in row.detail


def test_a_kit_built_from_a_dirty_tree_names_the_differing_file(
    repo: Path, base: Path, tmp_path: Path
) -> None:
    (repo / "patches" / "model.py").write_text("X = 'uncommitted'\n")
    result = build(repo, base, tmp_path / "k.tar.zst")
    assert result.manifest.code is not None
    assert result.manifest.code.repo_rev.endswith("+1dirty")
    row = consistency(result, repo)
    assert row.status == "fail" and row.ratio == "1/2"
    assert any(
        p.startswith("/opt/app/model.py: differs from patches/model.py") for p in row.problems
    )
    assert any("built from a dirty tree: patches/model.py" in p for p in row.problems)


def test_a_repository_without_the_stamped_commit_fails(
    repo: Path, base: Path, tmp_path: Path
) -> None:
    result = build(repo, base, tmp_path / "k.tar.zst")
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    (other / "a").write_text("a")
    git(other, "add", ".")
    git(other, "commit", "-qm", "x")
    row = consistency(result, other)
    assert row.status == "fail" and "is not in" in row.detail


def test_a_kit_without_a_stamp_cannot_claim_consistency(base: Path, tmp_path: Path) -> None:
    src = write_oci(tmp_path / "src", [*base_layers(), layer_tar([M("x", "f", b"x")])])
    result = build_kit(KitBuildOptions(base=str(base), source=str(src), out=tmp_path / "n.tar.zst"))
    row = consistency(result, tmp_path)
    assert row.status == "fail" and "no repo_rev stamp" in row.detail


def test_source_image_kits_find_sources_by_content(repo: Path, base: Path, tmp_path: Path) -> None:
    script = (repo / "scripts" / "serve_decode.sh").read_bytes()
    working = layer_tar(
        [
            M("srv", "d", mode=0o755),
            M("srv/serve_decode.sh", "f", script, 0o755),
            M("srv/gen", "f", b"generated"),
        ]
    )
    src = write_oci(tmp_path / "src", [*base_layers(), working])
    result = build_kit(
        KitBuildOptions(base=str(base), source=str(src), out=tmp_path / "s.tar.zst", repo=repo)
    )
    sources = {p.path: p.source for p in result.manifest.payload}
    assert sources == {"/srv/gen": None, "/srv/serve_decode.sh": "scripts/serve_decode.sh"}
    row = consistency(result, repo)
    assert row.status == "pass" and row.ratio == "1/1"
    assert "1 payload file(s) not from the repository" in row.detail


def test_git_is_never_run_through_a_shell(base: Path, tmp_path: Path) -> None:
    odd = tmp_path / "repo $(touch PWNED) ;x"
    odd.mkdir()
    (odd / "a.sh").write_text("#!/bin/sh\nA=${A:-1}\n")
    (odd / "kit.yaml").write_text(yaml.safe_dump({"files": [{"src": "a.sh", "dest": "/a.sh"}]}))
    git(odd, "init", "-q")
    git(odd, "add", ".")
    git(odd, "commit", "-qm", "x")
    result = build(odd, base, tmp_path / "o.tar.zst")
    assert consistency(result, odd).status == "pass"
    assert not list(tmp_path.rglob("PWNED")) and not Path("PWNED").exists()


def baseline_row(result: BuildResult, baseline: str | None) -> CheckResult | None:
    return verify_kit(KitVerifyOptions(archive=result.archive, baseline=baseline)).get("repo_rev")


def test_repo_rev_against_the_release_baseline(repo: Path, base: Path, tmp_path: Path) -> None:
    result = build(repo, base, tmp_path / "k.tar.zst")
    code = result.manifest.code
    assert code is not None
    assert baseline_row(result, None) is None
    good = baseline_row(result, code.repo_rev)
    assert good is not None and good.status == "pass" and good.ratio == "1/1"
    assert "image label servekit.repo_rev agrees" in good.detail
    by_commit = baseline_row(result, code.commit[:9])
    assert by_commit is not None and by_commit.status == "pass"
    bad = baseline_row(result, "7497a06+0dirty")
    assert bad is not None and bad.status == "fail"
    assert f"repo_rev {code.repo_rev} is not the release baseline 7497a06+0dirty" in bad.detail


def test_the_baseline_recorded_in_the_kit_is_used(repo: Path, base: Path, tmp_path: Path) -> None:
    spec = yaml.safe_load((repo / "kit.yaml").read_text())
    spec["expect"]["repo_rev"] = "0000000+0dirty"
    (repo / "kit.yaml").write_text(yaml.safe_dump(spec))
    git(repo, "commit", "-qam", "baseline")
    row = baseline_row(build(repo, base, tmp_path / "k.tar.zst"), None)
    assert row is not None and row.status == "fail"
    assert "the kit's expect.repo_rev" in row.detail


def test_release_table_with_every_input_and_its_evidence(
    repo: Path, base: Path, tmp_path: Path
) -> None:
    result = build(repo, base, tmp_path / "k.tar.zst")
    assert result.manifest.code is not None
    out = tmp_path / "evidence"
    options = KitVerifyOptions(
        archive=result.archive,
        out=out,
        repo=repo,
        base=str(base),
        baseline=result.manifest.code.repo_rev,
    )
    table, report = verify_release(options)
    assert report.ok, report.checks
    rows = {r.item: r for r in table.rows}
    assert rows["consistency (source = payload)"].ratio == "2/2"
    assert rows["rebuild"].status == "pass" and rows["rebuild"].ratio == "4/4"
    assert "diffids 3/3 layers equal" in rows["rebuild"].result
    assert rows["defaults spot-check"].ratio == "1/1"
    assert rows["repo_rev vs release baseline"].status == "pass"
    assert rows["smoke L1/L2"].status == "not run" and "--smoke" in rows["smoke L1/L2"].result
    assert table.ok and not table.complete
    for r in table.rows:
        assert r.evidence is None or (out / r.evidence).is_file(), r
    again = KitReleaseTable.model_validate_json((out / "kit-table.json").read_text())
    assert again == table
    markdown = (out / "kit-table.md").read_text()
    assert markdown == render_release_table(table)
    assert "| rebuild | ✅ pass | 4/4 |" in markdown and "[rebuild.json](rebuild.json)" in markdown
    rebuild = json.loads((out / "rebuild.json").read_text())
    assert [c["name"] for c in rebuild["checks"]] == [
        "diffids",
        "image id",
        "filesystem",
        "payload",
    ]


def test_release_table_without_inputs_says_how_to_run_each_row(
    repo: Path, base: Path, tmp_path: Path
) -> None:
    result = build(repo, base, tmp_path / "k.tar.zst")
    table = kit_release_table(verify_kit(KitVerifyOptions(archive=result.archive)))
    status = {r.item: r.status for r in table.rows}
    assert status["kit integrity"] == "pass" and status["defaults spot-check"] == "pass"
    assert [r.result for r in table.rows if r.status == "not run"] == [
        "give --repo DIR",
        "give --base BASE",
        "run 'sh selftest.sh image NONCE' in the rebuilt image, NONCE from this run's"
        " smoke-nonce.txt, and give --smoke LOG --nonce smoke-nonce.txt",
        "give --baseline REV, or record expect.repo_rev in the kit",
    ]


def test_a_failed_row_fails_the_table(repo: Path, base: Path, tmp_path: Path) -> None:
    (repo / "scripts" / "serve_decode.sh").write_text("#!/bin/sh\nSPEC=${SPEC:-0}\n")
    git(repo, "commit", "-qam", "regression")
    table = kit_release_table(
        verify_kit(KitVerifyOptions(archive=build(repo, base, tmp_path / "k.tar.zst").archive))
    )
    spot = next(r for r in table.rows if r.item == "defaults spot-check")
    assert (
        spot.status == "fail"
        and spot.ratio == "0/1"
        and "SPEC promised '1', found '0'" in spot.result
    )
    assert not table.ok


def test_verify_out_refuses_a_folder_it_did_not_write(
    repo: Path, base: Path, tmp_path: Path
) -> None:
    result = build(repo, base, tmp_path / "k.tar.zst")
    out = tmp_path / "busy"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(UsageError, match="not an empty folder"):
        verify_release(KitVerifyOptions(archive=result.archive, out=out))
    assert (out / "mine.txt").read_text() == "keep"


def test_cli_writes_the_table_and_exits_by_the_rows(repo: Path, base: Path, tmp_path: Path) -> None:
    result = build(repo, base, tmp_path / "k.tar.zst")
    out = tmp_path / "cli"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "servekit",
            "kit",
            "verify",
            str(result.archive),
            "--repo",
            str(repo),
            "--base",
            str(base),
            "--baseline",
            "deadbee",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "release table:" in done.stdout
    table = KitReleaseTable.model_validate_json((out / "kit-table.json").read_text())
    assert [r.status for r in table.rows] == ["pass", "pass", "pass", "not run", "pass", "fail"]
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "servekit",
            "kit",
            "verify",
            str(result.archive),
            "--base",
            str(tmp_path / "nope"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert missing.returncode == 2 and missing.stderr.startswith("error: ")
