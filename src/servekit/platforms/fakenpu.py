"""The NPU fabric of servekit's dry runs: what the stand-in hccn_tool and npu-smi answer.

A dry-run node (or pod) runs the preflight like a real one; what it finds is
played here. Each node gets a folder standing for its ``/`` (``PREFLIGHT_ROOT``):
``/dev/davinciN`` and the driver's control devices, ``/etc/hccn.conf``, the
driver (``version.info``) with the stand-in ``hccn_tool`` in its ``tools``,
``/usr/local/sbin/npu-smi``, and ``/root/model`` (a small model folder every
node shares: config, tokenizer, a safetensors index and its shards). The
stand-ins (``standin/``, POSIX sh like the importer's fake tools) read the
node's state folder (``FAKEPLATFORM_NPU``): each query's answer, written here in
the formats docs/preflight.md cites, for A2 (8 NPUs, ``-ip``, ``-ping``) and A3
(16 NPUs as 8 cards x 2 chips, ``-vnic``, ``-hccs_ping``, super pod IDs and
SDIDs). A ping reaches an NPU address whose link is up, unless the node is told
it cannot reach that peer.

:class:`Faults` injects what the preflight must catch, each on one node: a link
DOWN, a TLS switch differing, a peer unreachable, a port taken, a device busy,
the model missing, the driver's tools missing.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

STANDIN = Path(__file__).resolve().parent / "standin"
DRIVER_VERSION = "25.2.0"
MODEL_PATH = "/root/model"
CONTROL = ("davinci_manager", "devmm_svm", "hisi_hdc")
BUSY_PROCESS = (4242, "python3", 61000)


@dataclass(frozen=True)
class Faults:
    """What is wrong in a dry run, by node (or pod) index in the cluster's order."""

    link_down: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    """node -> its NPUs whose link is DOWN"""
    tls: Mapping[int, int] = field(default_factory=dict)
    """node -> the TLS switch all its NPUs report (the others report 0)"""
    unreachable: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    """node -> the nodes whose NPU addresses it cannot reach"""
    busy: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    """node -> its NPUs a process holds memory on"""
    port_taken: Mapping[int, int] = field(default_factory=dict)
    """node -> a port something else listens on there"""
    model_missing: tuple[int, ...] = ()
    tools_missing: tuple[int, ...] = ()


HEALTHY = Faults()


def npu_address(platform: str, node: int, device: int) -> str:
    """A node's NPU address: A2 a RoCE address per NPU, A3 a virtual (vnic) one."""
    if platform == "a3":
        return f"192.168.{node + 1}.{device + 1}"
    return f"10.20.{node}.{device + 1}"


def _hccn_answers(platform: str, node: int, device: int, faults: Faults) -> dict[str, str]:
    """Each hccn_tool query's output for one NPU (formats: docs/preflight.md)."""
    ip = npu_address(platform, node, device)
    gateway = ip.rsplit(".", 1)[0] + ".254"
    link = "DOWN" if device in faults.link_down.get(node, ()) else "UP"
    health = "Success" if link == "UP" else "Fault"
    tls = faults.tls.get(node, 0)
    address = f"ipaddr:{ip}\nnetmask:255.255.255.0\n"
    return {
        "lldp": f"Chassis ID TLV\n\tMAC: 02:00:00:00:{node:02x}:{device:02x}\n"
        f"Port ID TLV\n\tIfname: 400GE1/0/{device + 1}\n",
        "link": f"link status: {link}\n",
        "net_health": f"net health status: {health}\n",
        "netdetect": f"netdetect address: {gateway}\n",
        "gateway": f"default gateway:{gateway}, ifname: eth{device}\n",
        "ip" if platform == "a2" else "vnic": address,
        "tls": f"dev_id:{device}, tls switch[{tls}](0:disable, 1:enable), tls preconfigured[1]"
        "(0:non-preset, 1:preset), tls alarm time threshold[60]days\n",
    }


def _smi_table(platform: str, devices: int, busy: Sequence[int]) -> str:
    """``npu-smi info``: the device table and the process table (A2: 1 chip per NPU, A3: 2)."""
    chips = 2 if platform == "a3" else 1
    name = "Ascend910" if platform == "a3" else "910B3"
    rule = "+" + "-" * 27 + "+" + "-" * 15 + "+" + "-" * 52 + "+"
    heavy = "+" + "=" * 27 + "+" + "=" * 15 + "+" + "=" * 52 + "+"
    lines = [
        "+" + "-" * 96 + "+",
        f"| npu-smi {DRIVER_VERSION:<22}Version: {DRIVER_VERSION:<56}|",
        rule,
        "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|",
        "| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",
        heavy,
    ]
    for device in range(devices):
        npu, chip = divmod(device, chips)
        phy = f"{chip:<6}{device}" if platform == "a3" else f"{chip}"
        lines.append(
            f"| {npu:<6}{name:<20}| OK            | 90.0        40                0    / 0             |"
        )
        lines.append(
            f"| {phy:<26}| 0000:{0x80 + device:02X}:00.0  | 0           0    / 0          3400 / 65536         |"
        )
        lines.append(heavy)
    lines += [
        rule,
        "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |",
        heavy,
    ]
    for npu in range(devices // chips):
        held = [d for d in busy if d // chips == npu]
        if not held:
            lines.append(f"| No running processes found in NPU {npu:<61}|")
        for d in held:
            pid, who, mem = BUSY_PROCESS
            lines.append(f"| {npu:<8}{d % chips:<18}| {pid:<14}| {who:<25}| {mem:<24}|")
        lines.append(heavy)
    return "\n".join(lines) + "\n"


def _spod(node: int, device: int) -> str:
    """``npu-smi info -t spod-info``: SDID as the DCMI manual lays it out (server index in
    bits 22-31, chip 18-21, die 16-17, device id chip x 2 + die)."""
    chip, die = divmod(device, 2)
    sdid = (node << 22) | (chip << 18) | (die << 16) | (chip * 2 + die)
    return (
        f"        SDID                           : {sdid}\n"
        "        Super Pod Size                 : 48\n"
        "        Super Pod ID                   : 0\n"
        f"        Server Index                   : {node}\n"
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_model(folder: Path) -> None:
    """A model folder with what the preflight looks for (a stand-in: no real weights)."""
    shards = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    index = {"metadata": {"total_size": 16}, "weight_map": {"embed": shards[0], "head": shards[1]}}
    _write(folder / "config.json", json.dumps({"model_type": "servekit-dry-run"}) + "\n")
    _write(folder / "tokenizer.json", json.dumps({"version": "1.0", "model": {}}) + "\n")
    _write(folder / "tokenizer_config.json", "{}\n")
    _write(folder / "model.safetensors.index.json", json.dumps(index) + "\n")
    for shard in shards:
        _write(folder / shard, "stand-in\n")


class Fabric:
    """The nodes of one dry-run deployment, their filesystems and their NPU fabric."""

    def __init__(self, root: Path, platform: str, devices: int, faults: Faults = HEALTHY) -> None:
        self.root = root
        self.platform = platform
        self.devices = devices
        self.faults = faults
        self.reach = root / "reach"
        self.model = root / "model"
        self.reach.mkdir(parents=True, exist_ok=True)
        write_model(self.model)

    @property
    def ascend(self) -> bool:
        return self.platform in ("a2", "a3")

    def node_root(self, index: int) -> Path:
        return self.root / f"node{index}"

    def add(self, index: int, devices: int | None = None) -> dict[str, str]:
        """Lay out node ``index``; the environment its entry starts with."""
        root = self.node_root(index)
        count = self.devices if devices is None else devices
        if index not in self.faults.model_missing:
            (root / MODEL_PATH.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (root / MODEL_PATH.lstrip("/")).symlink_to(self.model)
        if not self.ascend:
            root.mkdir(parents=True, exist_ok=True)
            return {"PREFLIGHT_ROOT": str(root)}
        for name in (*(f"davinci{d}" for d in range(count)), *CONTROL):
            _write(root / "dev" / name, "")
        state = root / ".npu"
        self._state(state, index, count)
        _write(root / "etc" / "hccn.conf", self._hccn_conf(index, count))
        if index not in self.faults.tools_missing:
            driver = root / "usr/local/Ascend/driver"
            _write(driver / "version.info", f"Version={DRIVER_VERSION}\n")
            (driver / "tools").mkdir(parents=True, exist_ok=True)
            (driver / "tools" / "hccn_tool").symlink_to(STANDIN / "hccn_tool")
            (root / "usr/local/sbin").mkdir(parents=True, exist_ok=True)
            (root / "usr/local/sbin/npu-smi").symlink_to(STANDIN / "npu-smi")
        return {"PREFLIGHT_ROOT": str(root), "FAKEPLATFORM_NPU": str(state)}

    def _state(self, state: Path, index: int, count: int) -> None:
        faults = self.faults
        _write(state / "ping", "hccs_ping" if self.platform == "a3" else "ping")
        for device in range(count):
            for query, text in _hccn_answers(self.platform, index, device, faults).items():
                _write(state / "hccn" / str(device) / query, text)
            if device not in faults.link_down.get(index, ()):
                _write(self.reach / npu_address(self.platform, index, device), "")
            if self.platform == "a3":
                _write(state / "smi" / f"spod.{device // 2}.{device % 2}", _spod(index, device))
        _write(state / "smi" / "info", _smi_table(self.platform, count, faults.busy.get(index, ())))
        cut = faults.unreachable.get(index, ())
        lost = [npu_address(self.platform, peer, d) for peer in cut for d in range(self.devices)]
        _write(state / "unreachable", "".join(f"{a}\n" for a in lost))
        (state / "reach").symlink_to(self.reach)

    def _hccn_conf(self, index: int, count: int) -> str:
        lines = []
        for device in range(count):
            ip = npu_address(self.platform, index, device)
            gateway = ip.rsplit(".", 1)[0] + ".254"
            lines += [f"address_{device}={ip}", f"netmask_{device}=255.255.255.0",
                      f"netdetect_{device}={gateway}", f"gateway_{device}={gateway}",
                      f"send_arp_status_{device}=1"]  # fmt: skip
        return "\n".join(lines) + "\n"


@contextlib.contextmanager
def taken_ports(faults: Faults, addresses: Sequence[str]) -> Iterator[list[socket.socket]]:
    """Hold the ports the faults say something else listens on, for the dry run's life."""
    held: list[socket.socket] = []
    try:
        for index, port in faults.port_taken.items():
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a server would
            sock.bind((addresses[index], port))
            sock.listen(1)
            held.append(sock)
        yield held
    finally:
        for sock in held:
            sock.close()
