"""Source = payload, and the stamp against the release baseline.

``consistency`` (``kit verify --repo DIR``): every payload file that records
its repository source is compared with that file in the repository at the
stamped commit, read from git's object store (so it does not matter what is
checked out); the checkout's own state, a different commit or modified files,
is reported beside the count. ``repo_rev``: the stamp equals the release
baseline (``--baseline`` or the kit's ``expect.repo_rev``), and the rebuilt
image's ``servekit.repo_rev`` label, when it has one, equals the stamp.
"""

from __future__ import annotations

from pathlib import Path

from servekit.kit.checks import CheckResult, counted, failed
from servekit.kit.gitrepo import blob_sha256, has_commit, toplevel
from servekit.kit.models import KitManifest
from servekit.kit.stamp import REPO_REV_LABEL, baseline_matches, checkout


def _checkout_note(repo: Path, commit: str) -> str:
    head, dirty = checkout(repo)
    where = "the stamped commit" if head == commit else f"{head[:7]}, not the stamped commit"
    state = "clean" if not dirty else f"{len(dirty)} modified file(s): {', '.join(dirty[:5])}"
    return f"checkout at {where} ({state}); files compared at the stamped commit"


def consistency_row(m: KitManifest, repo: Path) -> CheckResult:
    """Every sourced payload file equals its repository file at the stamped commit."""
    if m.code is None:
        return failed("consistency", ["the kit has no repo_rev stamp (build it with --repo)"])
    top = toplevel(repo)
    if not has_commit(top, m.code.commit):
        return failed(
            "consistency",
            [f"commit {m.code.commit[:12]} ({m.code.repo_rev}) is not in {top}: fetch it first"],
        )
    sourced = [p for p in m.payload if p.source]
    if not sourced:
        return failed(
            "consistency",
            ["no payload file records a repository source (built without --repo?)"],
        )
    digests = blob_sha256(top, m.code.commit, [p.source for p in sourced if p.source])
    short = m.code.repo_rev
    problems, items = [], []
    for item in sourced:
        have = digests.get(item.source or "")
        if have is None:
            problems.append(f"{item.path}: {item.source} is not in the repository at {short}")
        elif have != item.sha256:
            problems.append(f"{item.path}: differs from {item.source} at {short}")
        items.append(f"{'ok' if have == item.sha256 else 'FAIL'} {item.path} = {item.source}")
    if m.code.dirty_files:
        problems.append(f"the kit was built from a dirty tree: {', '.join(m.code.dirty_files[:5])}")
    note = _checkout_note(top, m.code.commit)
    unsourced = len(m.payload) - len(sourced)
    extra = f"; {unsourced} payload file(s) not from the repository" if unsourced else ""
    row = counted(
        "consistency",
        len(sourced) - sum(1 for i in items if i.startswith("FAIL")),
        len(sourced),
        problems,
        [*items, note],
        what=f"payload files equal the repository at {short}",
    )
    return row.model_copy(update={"detail": f"{row.detail}{extra}; {note}"})


def repo_rev_row(m: KitManifest, baseline: str | None, label: str | None) -> CheckResult | None:
    """The stamp against the release baseline (no row when no baseline is known)."""
    origin = "--baseline"
    if baseline is None and m.expect is not None and m.expect.repo_rev:
        baseline, origin = m.expect.repo_rev, "the kit's expect.repo_rev"
    if baseline is None:
        return None
    if m.code is None:
        return failed("repo_rev", [f"the kit has no repo_rev stamp to compare with {baseline}"])
    problems = []
    if not baseline_matches(m.code, baseline):
        problems.append(f"repo_rev {m.code.repo_rev} is not the release baseline {baseline}")
    if label is not None and label != m.code.repo_rev:
        problems.append(f"image label {REPO_REV_LABEL}={label} differs from the stamp")
    where = f"image label {REPO_REV_LABEL} agrees" if label else "stamp in MANIFEST.json"
    return counted(
        "repo_rev",
        0 if problems else 1,
        1,
        problems,
        [f"stamp {m.code.repo_rev}; baseline {baseline} from {origin}; {where}"],
        what=f"{m.code.repo_rev} equals the release baseline {baseline} ({origin}; {where})",
    )
