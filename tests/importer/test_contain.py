"""A hostile folder changes nothing outside its scratch folder, and is refused in one line.

The folder's run.sh tries everything at once: write /etc, a harmless sysctl
(read before and after), /sys, the real home and /tmp outside scratch, a TCP
connection to a port this test listens on, a background process that outlives
it, and sleeping forever. After the import: every target is as it was, the
listener got no connection, no process of it is left, and the refusal is one line.
Each refusal reason is then proven on its own folder (positive controls: each
would be accepted without its one hostile line).
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.importer import folders

from servekit.importer import ImportRefused, extract_folder
from servekit.importer.contain import Limits

SYSCTL = Path("/proc/sys/kernel/printk_ratelimit_burst")
ENGINE = "exec vllm serve /root/model --port 8080\n"


class Listener:
    """A TCP listener on 127.0.0.1 that counts the connections it gets."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    it = Listener()
    yield it
    it.close()


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


def _folder(tmp_path: Path, body: str) -> Path:
    return folders.write(tmp_path / "hostile-a3" / "1node", {"run.sh": "#!/bin/sh\n" + body})


@pytest.mark.slow
def test_a_hostile_folder_changes_nothing_outside_its_scratch(
    tmp_path: Path, listener: Listener
) -> None:
    tag = uuid.uuid4().hex
    marker = f"servekit-hostile-{tag}"
    home = Path(os.path.expanduser("~")) / marker
    outside_tmp = Path("/tmp") / marker
    etc = Path("/etc") / marker
    here = tmp_path / marker  # the test's own folder: outside the import's scratch
    before = SYSCTL.read_text()
    body = f"""
echo x > {etc}
echo $(( $(cat {SYSCTL} 2>/dev/null || echo 10) + 7 )) > {SYSCTL}
echo 1 > /sys/kernel/{marker}
echo x > {home}
echo x > $HOME/{marker}
echo x > {outside_tmp}
echo x > {here}
python3 -c 'import socket; socket.create_connection(("127.0.0.1", {listener.port}), 2)'
sh -c 'sleep 1000; : {marker}' &
exec sleep 1000
"""
    with pytest.raises(ImportRefused) as refused:
        extract_folder(_folder(tmp_path, body), time_limit_s=8)
    message = str(refused.value)
    assert "\n" not in message
    assert "node 0" in message
    for path in (etc, home, outside_tmp, here):
        assert not path.exists(), path
    assert SYSCTL.read_text() == before
    assert not Path(f"/sys/kernel/{marker}").exists()
    assert listener.connections == 0
    assert _processes_with(marker) == []


def test_the_listener_sees_a_connection_made_outside_the_sandbox(listener: Listener) -> None:
    """Positive control of the network check above: the listener does count."""
    socket.create_connection(("127.0.0.1", listener.port), 2).close()
    for _ in range(50):
        if listener.connections:
            break
        threading.Event().wait(0.05)
    assert listener.connections == 1


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("touch /etc/servekit-x || true", "tried to write outside its scratch folder"),
        ("touch /usr/servekit-x || true", "tried to write outside its scratch folder"),
        ("touch /servekit-x || true", "tried to write outside its scratch folder"),
        (
            "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 9), 1)' || true",
            "tried to use the network",
        ),
    ],
)
def test_each_breach_is_one_line_naming_the_node_and_what(
    tmp_path: Path, line: str, reason: str
) -> None:
    with pytest.raises(ImportRefused) as refused:
        extract_folder(_folder(tmp_path, f"{line}\n{ENGINE}"), time_limit_s=30)
    message = str(refused.value)
    assert "\n" not in message
    assert f"1node: node 0 {reason}" in message


def test_without_the_hostile_line_the_same_folder_is_accepted(tmp_path: Path) -> None:
    facts = extract_folder(_folder(tmp_path, "touch /root/ok /tmp/ok\n" + ENGINE))
    assert [p.program for p in facts.process_facts()] == [("vllm", "serve", "/root/model")]


@pytest.mark.slow
def test_a_script_that_never_ends_is_killed_at_the_time_limit(tmp_path: Path) -> None:
    marker = f"servekit-forever-{uuid.uuid4().hex}"
    with pytest.raises(ImportRefused, match="ran past the 3s time limit") as refused:
        extract_folder(_folder(tmp_path, f"exec sh -c 'sleep 1000; : {marker}'\n"), time_limit_s=3)
    assert "\n" not in str(refused.value)
    assert _processes_with(marker) == []


@pytest.mark.slow
def test_a_fork_flood_hits_the_process_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("servekit.importer.extract.Limits", lambda time_s: Limits(time_s, 48))
    body = "i=0\nwhile [ $i -lt 200 ]; do sleep 5 & i=$((i + 1)); done\n" + ENGINE
    with pytest.raises(ImportRefused, match="process limit") as refused:
        extract_folder(_folder(tmp_path, body), time_limit_s=20)
    assert "\n" not in str(refused.value)


def test_output_without_end_is_bounded(tmp_path: Path) -> None:
    """A script printing forever fills at most the file size limit, then is refused."""
    with pytest.raises(ImportRefused) as refused:
        extract_folder(_folder(tmp_path, "yes servekit\n"), time_limit_s=5)
    assert "\n" not in str(refused.value)


def test_an_unreadable_or_missing_folder_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ImportRefused, match="not a folder"):
        extract_folder(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ImportRefused, match=r"no run\.sh"):
        extract_folder(tmp_path / "empty")


def test_the_sandbox_command_line_has_every_confinement(tmp_path: Path) -> None:
    """The options docs/importer.md promises, in the order that makes them hold."""
    from servekit.importer.contain import Sandbox

    sandbox = Sandbox(tmp_path, tmp_path / "platform", Limits())
    argv = sandbox.wrap(0, ["python3", "reaper.py", "dash", "/root/script/run.sh"])
    words = " ".join(argv)
    for option in (
        "--unshare-all --unshare-user",
        "--die-with-parent",
        "--new-session",
        "--cap-drop ALL",
        "--ro-bind /usr /usr",
        "--ro-bind-try /etc/passwd /etc/passwd",
        f"--ro-bind {tmp_path}/platform/config /user/global/config",
        f"--ro-bind {tmp_path}/platform/model /root/model",
        "--remount-ro /",
        "--proc /proc",
        f"--bind {tmp_path}/nodes/0/proc-sys /proc/sys",
        f"--bind {tmp_path}/nodes/0/sys /sys",
        f"--bind {tmp_path}/nodes/0/root /root",
        f"--bind {tmp_path}/nodes/0/tmp /tmp",
        "--nproc=256",
        "--core=0",
    ):
        assert option in words, option
    assert argv.index("/proc/sys") > argv.index("--proc"), "/proc/sys must be bound over /proc"
    assert "--ro-bind / /" not in words, "the host's / is never the sandbox's view"
    assert argv.index("--remount-ro") > argv.index("/root"), "the root is made read-only last"
    assert argv.index("/root/model") > argv.index("/root"), "the model mount is inside /root"
    assert argv[-4:] == ["python3", "reaper.py", "dash", "/root/script/run.sh"]
    if os.geteuid() == 0:
        assert argv[1:3] == ["--reuid=65534", "--regid=65534"]


def test_import_refused_is_a_usage_error_with_exit_code_2() -> None:
    from servekit.errors import UsageError

    assert issubclass(ImportRefused, UsageError)
    assert ImportRefused("x").exit_code == 2


def test_a_sandbox_that_cannot_be_built_is_named_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from servekit.importer.contain import Sandbox

    wrap = Sandbox.wrap

    def broken(self: Sandbox, index: int, argv: list[str]) -> list[str]:
        words = wrap(self, index, argv)
        return [
            *words[: words.index("--unshare-all")],
            "--no-such-option",
            *words[words.index("--unshare-all") :],
        ]

    monkeypatch.setattr(Sandbox, "wrap", broken)
    with pytest.raises(ImportRefused, match="bubblewrap could not build the sandbox"):
        extract_folder(_folder(tmp_path, ENGINE), time_limit_s=30)
