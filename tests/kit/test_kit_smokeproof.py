"""The smoke proof's own parts: nonces, the nonce file, the digest over the image's files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from servekit.errors import UsageError
from servekit.kit.fsmanifest import DIR, FILE, SYMLINK, Entry, FsState
from servekit.kit.smokeproof import NONCE, NONCE_FILE, expected_proof, issue_nonce, read_nonce


def _file(path: str, data: bytes) -> Entry:
    return Entry(FILE, 0o644, 0, 0, len(data), path, "", hashlib.sha256(data).hexdigest())


def _state(*entries: Entry) -> FsState:
    state = FsState()
    for entry in entries:
        state.put(entry)
    return state


def _by_hand(nonce: str, *lines: str) -> str:
    text = f"nonce {nonce}\n" + "".join(f"{line}\n" for line in lines)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def test_each_issued_nonce_is_fresh_and_read_back(tmp_path: Path) -> None:
    first = issue_nonce(tmp_path)
    assert read_nonce(tmp_path / NONCE_FILE) == first and NONCE.fullmatch(first)
    assert issue_nonce(tmp_path) != first


@pytest.mark.parametrize("text", ["", "not hex\n", "ab" * 8, "AB" * 16, "a" * 33, "a" * 300])
def test_a_file_that_is_not_an_issued_nonce_is_refused_naming_the_flag(
    tmp_path: Path, text: str
) -> None:
    (tmp_path / "n.txt").write_text(text)
    with pytest.raises(UsageError, match=r"^--nonce .*smoke-nonce.txt"):
        read_nonce(tmp_path / "n.txt")


def test_a_missing_nonce_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        read_nonce(tmp_path / "absent.txt")


@given(st.binary(max_size=400))
def test_any_bytes_are_a_nonce_or_one_refusal(data: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "n.txt"
        path.write_bytes(data)
        try:
            got = read_nonce(path)
        except UsageError as exc:
            assert str(exc).startswith("--nonce ") and "\n" not in str(exc)
        else:
            assert NONCE.fullmatch(got) and got == data.decode("ascii").strip()


def test_the_digest_is_the_image_files_as_the_shell_reads_them() -> None:
    nonce = "0" * 32
    release = b"ID=debian\n"
    payload = b"print(1)\n"
    state = _state(
        Entry(DIR, 0o755, 0, 0, 0, "/usr/lib"),
        _file("/usr/lib/os-release", release),
        Entry(SYMLINK, 0o777, 0, 0, 0, "/etc/os-release", "../usr/lib/os-release"),
        _file("/opt/app/a.py", payload),
    )
    paths = ["/opt/app/a.py", "/opt/app/gone.py", "/etc/os-release"]
    want = _by_hand(
        nonce,
        hashlib.sha256(payload).hexdigest(),
        "absent",
        hashlib.sha256(release).hexdigest(),
    )
    assert expected_proof(paths, state, nonce) == want
    assert expected_proof(paths, state, "1" * 32) != want


def test_another_rootfs_and_a_symlink_loop_give_another_digest() -> None:
    nonce = "a" * 32
    paths = ["/etc/os-release"]
    one = expected_proof(paths, _state(_file("/etc/os-release", b"ID=a\n")), nonce)
    two = expected_proof(paths, _state(_file("/etc/os-release", b"ID=b\n")), nonce)
    loop = _state(
        Entry(SYMLINK, 0o777, 0, 0, 0, "/etc/os-release", "/etc/x"),
        Entry(SYMLINK, 0o777, 0, 0, 0, "/etc/x", "os-release"),
    )
    assert len({one, two, expected_proof(paths, loop, nonce)}) == 3
    assert expected_proof(paths, loop, nonce) == _by_hand(nonce, "absent")
