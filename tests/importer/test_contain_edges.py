"""What a folder's scripts leave behind is read as data, never as a way out.

Each test plants one thing a hostile ``run.sh`` can leave in the places the
sandbox may write (its own output files, the platform folder) or does to the
importer's process, and checks that the importer neither follows it nor waits on
it nor prints it raw (issue 36, items 1, 6, 7 and 13).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.importer import folders

from servekit.importer import ImportRefused, extract_folder

ENGINE = "exec vllm serve /root/model --port 8080\n"
# The node's own output file, whatever the platform calls it: the shell's fd 1 or 2.
OUTPUT = "out=$(readlink /proc/$$/fd/{fd})\n"


def _folder(tmp_path: Path, body: str) -> Path:
    return folders.write(tmp_path / "hostile-a3" / "1node", {"run.sh": "#!/bin/sh\n" + body})


def _refusal(call: Callable[[], object], deadline_s: float = 60.0) -> str:
    """The one-line refusal of ``call``, failing (not hanging) if it never returns."""
    box: dict[str, BaseException | None] = {}

    def target() -> None:
        try:
            call()
            box["error"] = None
        except BaseException as exc:  # handed to the test thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(deadline_s)
    assert "error" in box, f"the import did not return within {deadline_s}s"
    error = box["error"]
    assert isinstance(error, ImportRefused), error
    message = str(error)
    assert "\n" not in message
    return message


def test_a_link_planted_as_the_node_output_is_not_followed(tmp_path: Path) -> None:
    """Item 1: stderr replaced by a link to a host file in a 0700 folder; exit 1."""
    secret_dir = tmp_path / "private"
    secret_dir.mkdir(mode=0o700)
    marker = f"servekit-secret-{uuid.uuid4().hex}"
    secret = secret_dir / "secret"
    secret.write_text(f"first line\n{marker}\n")
    secret.chmod(0o600)
    body = OUTPUT.format(fd=2) + f'rm -f "$out"; ln -s {secret} "$out"\nexit 1\n'
    message = _refusal(lambda: extract_folder(_folder(tmp_path, body), time_limit_s=30))
    assert "exited 1" in message
    assert marker not in message


def test_a_fifo_planted_as_the_node_output_does_not_block_the_import(tmp_path: Path) -> None:
    """Item 6: stdout replaced by a FIFO nobody writes to; the import still ends."""
    body = OUTPUT.format(fd=1) + 'rm -f "$out"; mkfifo "$out"\nexit 1\n'
    message = _refusal(lambda: extract_folder(_folder(tmp_path, body), time_limit_s=30))
    assert "exited 1" in message


def test_a_plain_output_file_is_still_read(tmp_path: Path) -> None:
    """Positive control of the two above: the last stderr line is in the refusal."""
    marker = f"servekit-said-{uuid.uuid4().hex}"
    message = _refusal(
        lambda: extract_folder(_folder(tmp_path, f"echo {marker} >&2\nexit 1\n"), time_limit_s=30)
    )
    assert message.endswith(f"exited 1: {marker}")


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_read_tail_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    import os

    from servekit.importer.platform.harness import read_small, read_tail

    target = tmp_path / "host"
    target.write_text("host content\n")
    planted = tmp_path / "stderr"
    if kind == "link":
        planted.symlink_to(target)
    else:
        os.mkfifo(planted)
    assert read_tail(planted) == ""
    assert read_small(planted, 100) is None
    assert read_tail(target) == "host content\n"


def test_sigterm_during_import_leaves_no_scratch_folder(tmp_path: Path) -> None:
    """Item 13: SIGTERM while the nodes run; TMPDIR holds no servekit-import-* after."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.helpers.cli import wide_env

    marker = f"servekit-term-{uuid.uuid4().hex}"
    folder = _folder(tmp_path, f"touch /tmp/started\nexec sh -c 'sleep 1000; : {marker}'\n")
    # TMPDIR must be reachable by the sandbox's user (nobody): not under pytest's 0700 folder.
    scratch = Path(tempfile.mkdtemp(prefix="servekit-term-"))
    scratch.chmod(0o755)
    (tmp_path / "catalog").mkdir()
    argv = [sys.executable, "-m", "servekit", "layouts", "import", str(folder)]
    argv += ["--name", "a3/hostile/1node", "--catalog", str(tmp_path / "catalog")]
    child = subprocess.Popen(
        argv, env=wide_env(TMPDIR=str(scratch)), stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not list(scratch.glob("servekit-import-*/nodes/0/tmp/started")):
            assert child.poll() is None, child.communicate()[1]
            assert time.monotonic() < deadline, "the node never started"
            time.sleep(0.05)
        child.send_signal(signal.SIGTERM)
        child.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
        left_over = sorted(p.name for p in scratch.iterdir())
        shutil.rmtree(scratch, ignore_errors=True)
    assert child.returncode == 128 + signal.SIGTERM
    assert left_over == []
    left = [p for p in os.listdir("/proc") if p.isdigit()]
    assert not any(marker.encode() in _cmdline(pid) for pid in left)


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_terminal_escapes_from_a_script_never_reach_the_terminal(tmp_path: Path) -> None:
    """Item 7: OSC 52 (clipboard), screen clear, hidden text and an 8-bit CSI are shown escaped."""
    said = r"\033]52;c;c2VydmVraXQ=\007\033[2J\033[8mhidden\033[0m\302\233J\342\200\256end"
    body = f"printf '{said}\\n' >&2\nexit 1\n"
    message = _refusal(lambda: extract_folder(_folder(tmp_path, body), time_limit_s=30))
    assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in message), repr(message)
    assert "\u202e" not in message
    assert r"\x1b]52;c;c2VydmVraXQ=\x07\x1b[2J\x1b[8mhidden\x1b[0m\x9bJ\u202eend" in message


def test_output_past_the_file_size_limit_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 7: output over the limit (scaled: 1 MiB) says so, not `exited 153` and NULs."""
    from servekit.importer.contain import Limits

    monkeypatch.setattr(
        "servekit.importer.extract.Limits", lambda time_s: Limits(time_s, file_bytes=1 << 20)
    )
    body = "exec head -c 3000000 /dev/zero >&2\n"
    message = _refusal(lambda: extract_folder(_folder(tmp_path, body), time_limit_s=30))
    assert "file size limit" in message
    assert "\x00" not in message


def test_shown_keeps_letters_and_escapes_controls() -> None:
    from servekit.importer.contain import shown

    assert shown("  導入 ok\tdone  ") == "導入 ok\\x09done"
    assert shown("\x00" * 500) == "\\x00" * 200


def _limited(monkeypatch: pytest.MonkeyPatch, **limits: int) -> None:
    from servekit.importer.contain import Limits

    monkeypatch.setattr("servekit.importer.extract.Limits", lambda time_s: Limits(time_s, **limits))


def test_disk_written_by_all_nodes_together_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 6: files each under the file size limit, past the import's disk limit (scaled)."""
    _limited(monkeypatch, disk_bytes=8 << 20)
    body = "for i in 1 2 3 4 5; do head -c 4000000 /dev/zero > /tmp/f$i; done\n" + ENGINE
    message = _refusal(lambda: extract_folder(_folder(tmp_path, body), time_limit_s=30))
    assert "disk limit" in message


def test_many_small_files_are_bounded_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _limited(monkeypatch, disk_entries=300)
    body = "mkdir /tmp/d; cd /tmp/d; i=0; while [ $i -lt 500 ]; do : > f$i; i=$((i+1)); done\n"
    message = _refusal(lambda: extract_folder(_folder(tmp_path, body + ENGINE), time_limit_s=60))
    assert "disk limit" in message


def test_disk_within_the_limit_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Positive control: the same writes, fewer of them, pass."""
    _limited(monkeypatch, disk_bytes=8 << 20)
    body = "head -c 4000000 /dev/zero > /tmp/f1\n" + ENGINE
    facts = extract_folder(_folder(tmp_path, body), time_limit_s=30)
    assert len(facts.processes) == 1


def test_the_disk_limit_counts_what_scripts_write_not_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder's own copies (2 MB each, per node and the staging one) are not counted."""
    _limited(monkeypatch, disk_bytes=1 << 20)
    folder = _folder(tmp_path, ENGINE)
    (folder / "data.txt").write_bytes(b"x" * 2_000_000)
    facts = extract_folder(folder, time_limit_s=30)
    assert len(facts.processes) == 1


def _memory_group_possible() -> bool:
    from servekit.importer.contain import MemoryGroup

    group = MemoryGroup.create(1 << 30)
    if group is None:
        return False
    group.remove()
    return True


HOG = "python3 -c 'import time; b = b\"x\" * 150_000_000; time.sleep(2)' &\n"


@pytest.mark.slow
@pytest.mark.skipif(not _memory_group_possible(), reason="no writable memory cgroup here")
def test_memory_of_every_process_together_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 6: three processes of 150 MB each (each under RLIMIT_AS), 256 MiB for all."""
    _limited(monkeypatch, total_memory_bytes=256 << 20)
    body = HOG * 3 + "wait\n" + ENGINE
    message = _refusal(lambda: extract_folder(_folder(tmp_path, body), time_limit_s=60))
    assert "memory limit" in message


@pytest.mark.slow
@pytest.mark.skipif(not _memory_group_possible(), reason="no writable memory cgroup here")
def test_memory_within_the_limit_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Positive control: one such process under the same cap passes."""
    _limited(monkeypatch, total_memory_bytes=256 << 20)
    facts = extract_folder(_folder(tmp_path, HOG + "wait\n" + ENGINE), time_limit_s=60)
    assert len(facts.processes) == 1


def test_locating_host_tuning_reads_each_script_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 6: 300 writes over 4 scripts read 4 scripts, not 300 x 4 (it took 26 s for 500)."""
    from servekit.importer import scan
    from servekit.importer.contain import Write

    for k in range(3):
        (tmp_path / f"role{k}.sh").write_text("export A=1\n" * 50)
    (tmp_path / "run.sh").write_text(
        "# a comment naming vm/key0 is not the write\n"
        + "".join(f"echo 1 > /proc/sys/vm/key{i}\n" for i in range(300))
        + "sysctl -w kernel.other=2\n"
    )
    reads: list[Path] = []
    real = scan._read_script
    monkeypatch.setattr(scan, "_read_script", lambda path: reads.append(path) or real(path))
    found = [Write(0, f"/proc/sys/vm/key{i}", "1") for i in range(300)]
    found.append(Write(0, "/proc/sys/kernel/other", "2"))
    found.append(Write(0, "/proc/sys/kernel/absent", "3"))
    tuning = {t.path: (t.file, t.line) for t in scan.host_tuning(tmp_path, found)}
    assert len(reads) == 4
    assert tuning["/proc/sys/vm/key1"] == ("run.sh", 3)
    assert tuning["/proc/sys/vm/key10"] == ("run.sh", 12)
    assert tuning["/proc/sys/kernel/other"] == ("run.sh", 302)
    assert tuning["/proc/sys/kernel/absent"] == (None, None)
