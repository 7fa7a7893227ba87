"""Kit commands on damaged and hostile kits: a failed row or exit 2, never a hang or traceback.

Each test pins one way a kit broke the commands before: a relative path in
fs-manifest.txt (an endless loop), bad UTF-8 and deeply nested JSON in members
(tracebacks), an unchecked zstd checksum and tar padding (changes unnoticed), a
missing kit (exit 1 instead of 2), and scratch folders left behind by a
terminated ``kit verify``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from functools import partial
from pathlib import Path

import pytest
from tests.helpers.cli import servekit_cli

from servekit.kit.build import BuildResult
from servekit.kit.checks import CheckReport
from servekit.kit.errors import KitRefused
from servekit.kit.fsmanifest import parse_line
from servekit.kit.kitarchive import write_sidecar
from servekit.kit.options import KitVerifyOptions
from servekit.kit.verify import verify_kit

from .kitedit import edit_kit, tar_stream, write_tar_stream

LIMIT_S = 120
MEMORY = 2 << 30
# A child with a memory cap and a time limit: a reader that loads too much or hangs fails.
bounded = partial(servekit_cli, timeout=LIMIT_S, memory_limit=MEMORY)


def rows(report: CheckReport) -> dict[str, tuple[str, str]]:
    return {c.name: (c.status, c.detail) for c in report.checks}


def change_member(name: str, edit: object) -> object:
    def change(root: Path) -> None:
        path = root / name
        path.write_bytes(edit(path.read_bytes()))  # type: ignore[operator]

    return change


def test_fs_manifest_path_without_leading_slash_fails_verify_in_bounded_time(
    kit: BuildResult, tmp_path: Path
) -> None:
    bad = edit_kit(
        kit.archive,
        tmp_path / "rel.tar.zst",
        change_member(
            "fs-manifest.txt",
            lambda b: b.replace(b"\t/opt/app/patch.py\t", b"\topt/app/patch.py\t"),
        ),  # type: ignore[arg-type]
    )
    done = bounded("kit", "verify", str(bad), "--json")
    assert done.returncode == 1, done.stderr[-2000:]
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["layers"]["status"] == "fail"
    assert "not a canonical image path" in checks["layers"]["detail"]
    assert (
        bounded(
            "kit", "rebuild", str(bad), "--base", "nope", "--out", str(tmp_path / "o")
        ).returncode
        == 2
    )


@pytest.mark.parametrize(
    "line",
    [
        "f\t0644\t0\t0\t1\topt/x\t-\t-",
        "f\t0644\t0\t0\t1\t/opt//x\t-\t-",
        "f\t0644\t0\t0\t1\t/opt/../x\t-\t-",
        "f\t0644\t0\t0\t1\t/opt/x/\t-\t-",
        "f\t0644\t0\t0\t1\t/\t-\t-",
        "z\t0644\t0\t0\t1\t/opt/x\t-\t-",
        "f\t+644\t0\t0\t1\t/opt/x\t-\t-",
        "f\t0644\t-1\t0\t1\t/opt/x\t-\t-",
        "f\t0644\t0\t0\t1\t/opt/x\t-\tnot-a-digest",
        "f\t0644\t0\t0\t1\t/opt/\\x4\t-\t-",
    ],
)
def test_manifest_lines_that_servekit_never_writes_are_refused(line: str) -> None:
    with pytest.raises(KitRefused):
        parse_line(line)


def test_fsstate_refuses_a_relative_path_instead_of_looping() -> None:
    code = (
        "from servekit.kit.fsmanifest import FsState, Entry\n"
        "from servekit.kit.errors import KitRefused\n"
        "try:\n    FsState().put(Entry('f', 0o644, 0, 0, 0, 'a/b/c'))\n"
        "except KitRefused:\n    print('refused')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "refused"


TEXT_MEMBERS = [
    ("MANIFEST.json", "manifest"),
    ("SHA256SUMS", "members"),
    ("fs-manifest.txt", "layers"),
    ("payload.sha256", "payload"),
    ("base-diffids.txt", "config"),
    ("README.md", "generated"),
    ("selftest.sh", "generated"),
]


@pytest.mark.parametrize(("member", "row"), TEXT_MEMBERS)
def test_non_utf8_byte_in_a_text_member_is_a_failed_row(
    kit: BuildResult, tmp_path: Path, member: str, row: str
) -> None:
    bad = edit_kit(
        kit.archive,
        tmp_path / "u.tar.zst",
        change_member(member, lambda b: b[:20] + b"\xff\xfe" + b[20:]),  # type: ignore[arg-type]
        sums=member != "SHA256SUMS",
    )
    report = verify_kit(KitVerifyOptions(archive=bad))
    assert not report.ok
    status, detail = rows(report)[row]
    assert status == "fail"
    if row != "generated":
        assert "not UTF-8 (byte 0xff" in detail


@pytest.mark.parametrize("member", ["MANIFEST.json", "config.json"])
def test_deeply_nested_json_is_a_failed_row_not_a_recursion_error(
    kit: BuildResult, tmp_path: Path, member: str
) -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    bad = edit_kit(kit.archive, tmp_path / "d.tar.zst", change_member(member, lambda b: deep))  # type: ignore[arg-type]
    report = verify_kit(KitVerifyOptions(archive=bad))
    row = "manifest" if member == "MANIFEST.json" else "config"
    assert rows(report)[row][0] == "fail"
    assert "nests deeper" in rows(report)[row][1]
    done = bounded("kit", "inspect", str(bad))
    assert done.returncode == (2 if member == "MANIFEST.json" else 0)
    assert "Traceback" not in done.stderr


def test_kit_without_a_zstd_checksum_fails_the_archive_row(
    kit: BuildResult, tmp_path: Path
) -> None:
    bare = write_tar_stream(tmp_path / "n.tar.zst", tar_stream(kit.archive), checksum=False)
    status, detail = rows(verify_kit(KitVerifyOptions(archive=bare)))["archive"]
    assert status == "fail" and "no content checksum" in detail


def test_a_flipped_zstd_checksum_fails_even_with_a_forged_sidecar(
    kit: BuildResult, tmp_path: Path
) -> None:
    data = bytearray(kit.archive.read_bytes())
    data[-2] ^= 0x10  # inside the 4-byte content checksum at the end of the frame
    bad = tmp_path / "c.tar.zst"
    bad.write_bytes(bytes(data))
    write_sidecar(bad)
    report = verify_kit(KitVerifyOptions(archive=bad))
    assert rows(report)["sidecar"][0] == "pass"
    assert rows(report)["archive"][0] == "fail" and "checksum" in rows(report)["archive"][1]


def padding_offsets(tar: bytes) -> dict[str, int]:
    """One offset in each kind of tar padding of a kit stream."""
    import io

    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        members = archive.getmembers()
    padded = next(m for m in members if m.isreg() and m.size % 512)
    last = members[-1]
    end = last.offset_data + last.size + (-last.size % 512)
    return {
        "member padding": padded.offset_data + padded.size,
        "end-of-archive block": end + 700,
        "record padding": len(tar) - 1,
        "checksum field terminator": padded.offset + 148 + 7,
        "mtime field": padded.offset + 136 + 3,
    }


@pytest.mark.parametrize(
    "region",
    [
        "member padding",
        "end-of-archive block",
        "record padding",
        "checksum field terminator",
        "mtime field",
    ],
)
def test_a_flip_in_tar_padding_or_headers_fails_verify_with_a_forged_sidecar(
    kit: BuildResult, tmp_path: Path, region: str
) -> None:
    tar = bytearray(tar_stream(kit.archive))
    tar[padding_offsets(bytes(tar))[region]] ^= 0x01
    bad = write_tar_stream(tmp_path / "p.tar.zst", bytes(tar))
    report = verify_kit(KitVerifyOptions(archive=bad))
    assert rows(report)["sidecar"][0] == "pass"
    status, detail = rows(report)["archive"]
    assert status == "fail" and "canonical packing" in detail


def test_bytes_after_the_tar_end_fail_verify(kit: BuildResult, tmp_path: Path) -> None:
    bad = write_tar_stream(tmp_path / "t.tar.zst", tar_stream(kit.archive) + b"\0" * 10240)
    assert rows(verify_kit(KitVerifyOptions(archive=bad)))["archive"][0] == "fail"


def test_verify_of_a_missing_kit_exits_2_with_one_line(tmp_path: Path) -> None:
    for target in (tmp_path / "missing.tar.zst", tmp_path):
        done = bounded("kit", "verify", str(target))
        assert done.returncode == 2, done
        assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1


def test_a_folder_kit_with_a_fifo_or_link_fails_members_without_blocking(
    kit: BuildResult, tmp_path: Path
) -> None:
    from servekit.kit.kitarchive import unpack
    from servekit.kit.streams import Limits

    root = unpack(kit.archive, tmp_path / "x", Limits())
    os.mkfifo(root / "pipe")
    (root / "zero").symlink_to("/dev/zero")
    (root / "README.md").unlink()
    (root / "README.md").symlink_to("/etc/hostname")
    done = bounded("kit", "verify", str(root), "--json")
    assert done.returncode == 1, done.stderr[-2000:]
    members = {c["name"]: c for c in json.loads(done.stdout)["checks"]}["members"]
    assert members["status"] == "fail" and "link or special file" in members["detail"]


def scratch_dirs(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("servekit-kit-*"))


SLOW_VERIFY = """
import sys, tarfile, time
from pathlib import Path
real_next = tarfile.TarFile.next
flag = Path(sys.argv[1])
def slow_next(self):
    if not flag.exists():
        flag.write_text("unpacking")
        time.sleep(300)
    return real_next(self)
tarfile.TarFile.next = slow_next
sys.argv = ["servekit", "kit", "verify", sys.argv[2]]
from servekit.cli import main
from servekit.kit.options import KitVerifyOptions
main()
"""


def start_slow_verify(kit: Path, tmp: Path) -> subprocess.Popen[str]:
    flag = tmp / "flag"
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_VERIFY, str(flag), str(kit)],
        env={**os.environ, "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for _ in range(1200):
        if flag.exists() or proc.poll() is not None:
            break
        time.sleep(0.05)
    assert flag.exists(), proc.communicate(timeout=10)
    assert scratch_dirs(tmp), "the unpacked kit should be in a scratch folder by now"
    return proc


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_terminated_verify_leaves_no_scratch_folder(
    kit: BuildResult, tmp_path: Path, signum: int, code: int
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = start_slow_verify(kit.archive, tmp)
    proc.send_signal(signum)
    proc.communicate(timeout=60)
    assert proc.returncode == code
    assert scratch_dirs(tmp) == []


def test_the_next_run_sweeps_a_killed_runs_scratch_folder(kit: BuildResult, tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    stranger = tmp / "servekit-kit-someone-else"
    stranger.mkdir()
    proc = start_slow_verify(kit.archive, tmp)
    proc.kill()
    proc.communicate(timeout=60)
    assert len(scratch_dirs(tmp)) == 2
    done = bounded("kit", "verify", str(kit.archive), env={**os.environ, "TMPDIR": str(tmp)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert scratch_dirs(tmp) == [stranger]  # only folders whose process is gone, named as ours


def test_python_payload_nesting_too_deeply_fails_compile(tmp_path: Path) -> None:
    from .imagegen import M
    from .test_kit_verify import kit_with

    result = kit_with(tmp_path, [M("opt/app/deep.py", "f", b"-" * 100_000 + b"1\n")])
    status, detail = rows(verify_kit(KitVerifyOptions(archive=result.archive)))["compile"]
    assert status == "fail" and "deep.py" in detail


def test_members_out_of_the_packers_order_fail_the_archive_row(
    kit: BuildResult, tmp_path: Path
) -> None:
    import io

    with tarfile.open(fileobj=io.BytesIO(tar_stream(kit.archive))) as archive:
        items = [(m, archive.extractfile(m)) for m in archive.getmembers()]
        members = [(m, fh.read() if fh else b"") for m, fh in items]
    members[1], members[2] = members[2], members[1]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
        for info, data in members:
            out.addfile(info, io.BytesIO(data) if info.isreg() else None)
    bad = write_tar_stream(tmp_path / "o.tar.zst", buf.getvalue())
    status, detail = rows(verify_kit(KitVerifyOptions(archive=bad)))["archive"]
    assert status == "fail" and "out of the packer's sorted order" in detail


@pytest.mark.parametrize(
    "tail",
    [b"\x50\x2a\x4d\x18\x04\x00\x00\x00abcd", b"garbage"],
    ids=["skippable frame", "garbage"],
)
def test_bytes_after_the_zstd_frame_fail_the_archive_row(
    kit: BuildResult, tmp_path: Path, tail: bytes
) -> None:
    bad = tmp_path / "f.tar.zst"
    bad.write_bytes(kit.archive.read_bytes() + tail)
    write_sidecar(bad)
    status, detail = rows(verify_kit(KitVerifyOptions(archive=bad)))["archive"]
    assert status == "fail"
    assert "follow the zstd frame" in detail or "not a readable" in detail


def test_text_members_are_read_within_an_address_space_limit(
    kit: BuildResult, tmp_path: Path
) -> None:
    done = servekit_cli(
        "kit", "verify", str(kit.archive), "--json", timeout=LIMIT_S, memory_limit=768 << 20
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_zstd_frame_header_other_than_the_packers_fails_the_archive_row(
    kit: BuildResult, tmp_path: Path
) -> None:
    data = bytearray(kit.archive.read_bytes())
    data[5] ^= 0x08  # the window descriptor: a larger window, the same content
    bad = tmp_path / "w.tar.zst"
    bad.write_bytes(bytes(data))
    write_sidecar(bad)
    status, detail = rows(verify_kit(KitVerifyOptions(archive=bad)))["archive"]
    assert status == "fail" and "frame header differs" in detail
