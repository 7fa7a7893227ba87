"""Import run by an ordinary user: the sandbox sees no private file of anyone (issue 36 item 2).

The importer runs as ``nobody`` (via ``setpriv`` when the tests run as root) with
a home of its own holding a ``.netrc`` (mode 0600, its own) and a world-readable
file beside it, both outside ``/tmp`` and ``/root`` (which the sandbox always
hid). A folder's ``run.sh`` puts ``$(cat ...)`` of each into a flag value; the
recorded facts (what ``source.json`` and the profile are written from) must hold
neither. The positive control reads the same files from outside the sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

NOBODY = 65534
SRC = Path(__file__).resolve().parents[2] / "src"
EXTRACT = """
import json, sys
from pathlib import Path
from servekit.importer import ImportRefused, extract_folder
try:
    facts = extract_folder(Path(sys.argv[1]), time_limit_s=60)
except ImportRefused as exc:
    print("refused:", exc)
    sys.exit(2)
print(json.dumps(facts.document()))
"""


@pytest.fixture
def place() -> Iterator[Path]:
    """A folder outside /tmp and /root that ``nobody`` owns (the sandbox always hid those)."""
    top = Path(tempfile.mkdtemp(prefix="servekit-user-", dir="/var/tmp"))
    try:
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _as_user(argv: list[str], home: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "PYTHONPATH": str(SRC),
        "LANG": "C.UTF-8",
    }
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("setpriv (util-linux) is needed to run the import as an ordinary user")
        prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    return subprocess.run(
        [*prefix, *argv], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_an_ordinary_users_files_never_reach_the_facts(place: Path) -> None:
    tag = uuid.uuid4().hex
    home, tmp = place / "home", place / "tmp"
    home.mkdir()
    tmp.mkdir()
    netrc = home / ".netrc"
    netrc.write_text(f"machine example.invalid login me password netrc-{tag}\n")
    netrc.chmod(0o600)
    public = place / "public.txt"
    public.write_text(f"public-{tag}\n")
    folder = place / "user-a3" / "1node"
    folder.mkdir(parents=True)
    (folder / "run.sh").write_text(
        "#!/bin/sh\n"
        "exec vllm serve /root/model --port 8080 "
        f'--served-model-name "a$(cat ~/.netrc {netrc} 2>/dev/null | tr -d " ")" '
        f'--api-key "b$(cat {public} 2>/dev/null)"\n'
    )
    if os.geteuid() == 0:
        for path in [place, *place.rglob("*")]:
            os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    place.chmod(0o755)
    done = _as_user([sys.executable, "-c", EXTRACT, str(folder)], home, tmp)
    assert done.returncode == 0, done.stdout + done.stderr
    facts = json.loads(done.stdout)
    (engine,) = facts["processes"]
    assert ["--served-model-name", "a"] in engine["flags"], engine["flags"]
    assert ["--api-key", "b"] in engine["flags"], engine["flags"]
    assert tag not in done.stdout
    assert list(tmp.iterdir()) == [], "the import left its scratch folder behind"
    # Positive control: outside the sandbox the same user reads both files.
    outside = _as_user(["/bin/sh", "-c", f"cat {netrc} {public}"], home, tmp)
    assert f"netrc-{tag}" in outside.stdout
    assert f"public-{tag}" in outside.stdout


def test_a_home_inside_an_allowed_folder_is_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The invoking user's $HOME under /usr (or the platform) gets an empty tmpfs over it."""
    from servekit.importer import contain

    monkeypatch.setattr(contain, "invoking_homes", lambda: ["/usr/lib", "/home/someone"])
    argv = contain.Sandbox(tmp_path, tmp_path / "platform", contain.Limits()).wrap(0, ["true"])
    words = " ".join(argv)
    assert "--tmpfs /usr/lib" in words
    assert "/home/someone" not in words  # outside every allowed folder: absent already
    assert argv.index("--tmpfs") > argv.index("/usr"), "the mask goes over the bind"
