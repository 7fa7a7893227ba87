"""What one node offers, checked: tools, devices, NPU links, ports, the model, its peers.

Part of servekit's preflight, shipped beside the scripts as
``servekit_preflight_probe.py`` (standard library, Python 3.8 syntax); the
entry is ``servekit_preflight.py``. Every tool runs without a shell, bounded in
time and output; every parser reads the formats the vLLM-Ascend PD multi-node
guide and Huawei's hccn_tool / npu-smi manuals show (docs/preflight.md names
the source of each) and returns None for anything else.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

MAX_TOOL_BYTES = 256 << 10
MAX_CONFIG_BYTES = 4 << 20
MAX_INDEX_BYTES = 64 << 20
MAX_DIR_ENTRIES = 100000
MAX_TEXT = 300
MAX_ITEMS = 4096
TOOL_TIMEOUT_S = 30.0
PING_TIMEOUT_S = 60.0
WORKERS = 16
OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
LEVELS = (OK, WARN, FAIL, SKIP)
ASCEND = ("a2", "a3")

HCCN_TOOL_PATHS = (
    "/usr/local/Ascend/driver/tools/hccn_tool",
    "/usr/local/sbin/hccn_tool",
    "/usr/local/bin/hccn_tool",
)
NPU_SMI_PATHS = ("/usr/local/sbin/npu-smi", "/usr/local/bin/npu-smi")
DRIVER_DIR = "/usr/local/Ascend/driver"
DRIVER_VERSION = "/usr/local/Ascend/driver/version.info"
HCCN_CONF = "/etc/hccn.conf"
CONTROL_DEVICES = ("davinci_manager", "devmm_svm", "hisi_hdc")
MOUNT_DRIVER = "-v /usr/local/Ascend/driver:/usr/local/Ascend/driver"
MOUNT_NPU_SMI = "-v /usr/local/sbin/npu-smi:/usr/local/sbin/npu-smi"
MOUNT_HCCN_CONF = "-v /etc/hccn.conf:/etc/hccn.conf"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "tiktoken.model",
    "vocab.json",
    "tokenizer_config.json",
)
# The hccn_tool queries the guide runs on every NPU (check_hccn.sh step 1).
LINK_QUERIES = ("lldp", "link", "net_health", "netdetect", "gateway")
PING_OF = {"a2": "-ping", "a3": "-hccs_ping"}
IP_OF = {"a2": "-ip", "a3": "-vnic"}
CHIPS_PER_NPU = {"a2": 1, "a3": 2}
HEALTH_STATES = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")

_IPV4 = r"(?:\d{1,3}\.){3}\d{1,3}"
_LINK = re.compile(r"link status\s*:\s*([A-Za-z]+)")
_HEALTH = re.compile(r"net health status\s*:\s*([A-Za-z][A-Za-z ]{0,40})")
_TLS = re.compile(r"tls switch\s*\[\s*(\d+)\s*\]")
_IPADDR = re.compile(r"ipaddr\s*:\s*(" + _IPV4 + ")")
_NETMASK = re.compile(r"netmask\s*:\s*(" + _IPV4 + ")")
_ADDRESS = re.compile(r"address\s*:\s*(" + _IPV4 + ")")
_ANY_IP = re.compile(r"(?<![\d.])(" + _IPV4 + r")(?![\d.])")
_IFNAME = re.compile(r"Ifname\s*:\s*(\S{1,64})")
_SUPERPOD = re.compile(r"Super\s*Pod\s*ID\s*:\s*(\d{1,10})", re.I)
_SDID = re.compile(r"\bSDID\s*:\s*(\d{1,12})")
_DRIVER = re.compile(r"^\s*Version\s*=\s*(\S{1,64})", re.M)
_CELLS = re.compile(r"^\|(.*)\|\s*$")
_CONF_LINE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_.-]{0,63})\s*=\s*(.{0,200}?)\s*$")
_DEVICE_FILE = re.compile(r"^davinci(\d{1,4})$")

if TYPE_CHECKING:  # annotations only: Python 3.8 cannot subscript dict at run time
    Check = dict[str, Any]
    Doc = dict[str, Any]
    Runner = Callable[..., tuple[int, str]]


def clean(value: object, limit: int = MAX_TEXT) -> str:
    """``value`` as one printable line of at most ``limit`` characters."""
    text = str(value)[: limit * 4]
    out = "".join(c if c.isprintable() and c not in "\r\n\t" else " " for c in text)
    return out[:limit]


def check(name: str, level: str, detail: str) -> Check:
    return {"check": name, "level": level, "detail": clean(detail)}


def ok(name: str, detail: str) -> Check:
    return check(name, OK, detail)


def warn(name: str, detail: str) -> Check:
    return check(name, WARN, detail)


def fail(name: str, detail: str) -> Check:
    return check(name, FAIL, detail)


def failed(checks: Iterable[Check], name: str | None = None) -> bool:
    return any(c["level"] == FAIL and name in (None, c["check"]) for c in checks)


def span(devices: Iterable[int]) -> str:
    """``0-15`` for a run of ids, else the ids (``-`` for none)."""
    ids = sorted(set(devices))
    if not ids:
        return "-"
    if ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 1:
        return f"{ids[0]}-{ids[-1]}"
    return ",".join(str(d) for d in ids)


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------- the node


def run_tool(argv: Sequence[str], timeout: float = TOOL_TIMEOUT_S) -> tuple[int, str]:
    """Run a tool (never a shell); its exit status and at most 256 KiB of its output."""
    try:
        done = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:g} s"
    except OSError as exc:
        return 127, f"cannot run {os.path.basename(argv[0])}: {type(exc).__name__}"
    return done.returncode, done.stdout[:MAX_TOOL_BYTES].decode("utf-8", "replace")


class Node:
    """What this node offers: its filesystem (under ``root``) and its tools."""

    def __init__(self, root: str = "/", runner: Runner | None = None) -> None:
        self.root = root or "/"
        self.run: Runner = runner or run_tool

    def path(self, absolute: str) -> str:
        """``absolute`` under this node's root (a relative path stays relative)."""
        if not os.path.isabs(absolute) or self.root == "/":
            return absolute
        return os.path.join(self.root, absolute.lstrip("/"))

    def tool(self, name: str, places: Sequence[str]) -> str | None:
        """A tool on PATH, else at one of the host driver's places (under the root)."""
        found = shutil.which(name)
        if found:
            return found
        for place in places:
            here = self.path(place)
            if os.path.isfile(here) and os.access(here, os.X_OK):
                return here
        return None


# ---------------------------------------------------------------- parsers


def parse_link(text: str) -> str | None:
    """``link status: UP`` -> ``UP`` (hccn_tool -i N -link -g)."""
    m = _LINK.search(text)
    return m.group(1).upper() if m else None


def parse_net_health(text: str) -> str | None:
    """``net health status: Success`` -> ``Success`` (hccn_tool -i N -net_health -g)."""
    m = _HEALTH.search(text)
    return m.group(1).strip() if m else None


def parse_tls_switch(text: str) -> int | None:
    """``dev_id:0, tls switch[0](0:disable, 1:enable), ...`` -> 0 (hccn_tool -i N -tls -g)."""
    m = _TLS.search(text)
    return int(m.group(1)) if m else None


def parse_ipaddr(text: str) -> str | None:
    """``ipaddr:10.0.0.10`` -> the NPU's address (hccn_tool -i N -ip -g / -vnic -g)."""
    m = _IPADDR.search(text)
    return m.group(1) if m and is_ip(m.group(1)) else None


def parse_netmask(text: str) -> str | None:
    m = _NETMASK.search(text)
    return m.group(1) if m and is_ip(m.group(1)) else None


def parse_any_ip(text: str) -> str | None:
    """The first IPv4 address of the output (the gateway of -gateway -g)."""
    for m in _ANY_IP.finditer(text):
        if is_ip(m.group(1)):
            return m.group(1)
    return None


def parse_detect(text: str) -> str | None:
    """The detection address of -netdetect -g (``... address: IP``), else the first IP."""
    m = _ADDRESS.search(text)
    found = m.group(1) if m else parse_any_ip(text)
    return found if found and is_ip(found) else None


def parse_ifname(text: str) -> str | None:
    """The switch port of -lldp -g (its ``Ifname:`` line, as the guide greps)."""
    m = _IFNAME.search(text)
    return clean(m.group(1), 64) if m else None


def parse_spod(text: str) -> tuple[int | None, int | None]:
    """(Super Pod ID, SDID) of ``npu-smi info -t spod-info -i CARD -c CHIP``."""
    pod, sdid = _SUPERPOD.search(text), _SDID.search(text)
    return (int(pod.group(1)) if pod else None, int(sdid.group(1)) if sdid else None)


def parse_driver_version(text: str) -> str | None:
    """``Version=...`` of the driver's version.info."""
    m = _DRIVER.search(text)
    return clean(m.group(1), 64) if m else None


def parse_ping(status: int, text: str) -> bool:
    """A ping reached its target: the tool said so (``... ping success``, or no loss)."""
    low = text.lower()
    if status != 0 or "fail" in low or "timeout" in low or "unreachable" in low:
        return False
    return "success" in low or " 0% packet loss" in low or " 0.00% packet loss" in low


def parse_hccn_conf(text: str) -> dict[str, str]:
    """``/etc/hccn.conf``'s ``key=value`` lines (comments and other lines left out)."""
    found: dict[str, str] = {}
    for line in text.splitlines()[:MAX_ITEMS]:
        m = None if line.lstrip().startswith("#") else _CONF_LINE.match(line)
        if m:
            found[m.group(1)] = clean(m.group(2), 200)
    return found


def _cells(line: str) -> list[str] | None:
    m = _CELLS.match(line.strip())
    return [c.strip() for c in m.group(1).split("|")] if m else None


def _process_row(cells: list[str], chips_per_npu: int) -> tuple[int, int, str, int] | None:
    """``| NPU Chip | pid | name | memory [| pid in container] |`` -> (device, pid, name,
    MB), else None."""
    ids, pid, name, mem = (c.split() for c in cells[:4])
    if len(ids) != 2 or not all(x.isdigit() for x in ids) or not pid or not pid[0].isdigit():
        return None
    memory = int(mem[0]) if mem and mem[0].isdigit() else 0
    device = int(ids[0]) * chips_per_npu + int(ids[1])
    return device, int(pid[0]), clean(" ".join(name), 60) or "?", memory


def parse_npu_smi(
    text: str, chips_per_npu: int
) -> tuple[dict[int, str], dict[int, list[tuple[int, str, int]]]]:
    """``npu-smi info``: each device's health, and the processes holding its memory.

    The device table has two lines per chip (``| NPU Name | Health | ...`` then
    ``| Chip [Phy-ID] | Bus-Id | ...``); the process table ``| NPU Chip | Process
    id | Process name | Process memory(MB) |`` (newer drivers add ``| Process id in
    container |``), or ``No running processes found in NPU N``. A device is its
    Phy-ID when the table shows one, else ``NPU x chips per NPU + Chip``.
    """
    health: dict[int, str] = {}
    procs: dict[int, list[tuple[int, str, int]]] = {}
    pending: tuple[int, str] | None = None
    for line in text.splitlines()[: MAX_ITEMS * 4]:
        cells = _cells(line)
        if cells is not None and len(cells) >= 4:
            row = _process_row(cells, chips_per_npu)
            if row is not None:
                procs.setdefault(row[0], []).append(row[1:])
            continue
        first = cells[0].split() if cells is not None and len(cells) >= 3 else []
        second = cells[1].split() if cells is not None and len(cells) >= 3 else []
        named = (
            len(first) >= 2 and first[0].isdigit() and bool(second) and second[0] in HEALTH_STATES
        )
        if pending is None and named:
            pending = (int(first[0]), second[0])
            continue
        if pending is not None and first and first[0].isdigit():
            npu, state = pending
            phy = int(first[1]) if len(first) > 1 and first[1].isdigit() else None
            health[phy if phy is not None else npu * chips_per_npu + int(first[0])] = state
        pending = None
    return health, procs


# ---------------------------------------------------------------- local checks


def device_files(node: Node) -> list[int]:
    """The NPU device ids this node shows (``/dev/davinciN``)."""
    try:
        names = os.listdir(node.path("/dev"))[:MAX_DIR_ENTRIES]
    except OSError:
        return []
    return sorted(int(m.group(1)) for m in (_DEVICE_FILE.match(n) for n in names) if m)


def _gpu_devices(node: Node, want: list[int]) -> tuple[list[Check], list[int]]:
    missing = [d for d in want if not os.path.exists(node.path(f"/dev/nvidia{d}"))]
    if missing:
        why = f"/dev/nvidia{missing[0]} is missing; start the container with the GPUs (--gpus)"
        return [fail("devices", why)], want
    return [ok("devices", f"{len(want)} GPUs present")], want


def check_devices(node: Node, spec: Doc, unit: Doc) -> tuple[list[Check], list[int]]:
    """The devices the layout places here are present (and the ids of those it uses)."""
    want = list(unit["devices"])
    if not want:
        return [check("devices", SKIP, "no accelerator devices on this unit")], []
    if spec["platform"] == "nvidia":
        return _gpu_devices(node, want)
    seen = device_files(node)
    out: list[Check] = []
    used = seen[: len(want)] if unit["device_ids"] == "visible" else want
    if unit["device_ids"] == "visible" and len(seen) < len(want):
        out.append(
            fail(
                "devices",
                f"{len(seen)} NPUs visible (/dev/davinciN), this pod needs {len(want)}; "
                "request them from the device plugin",
            )
        )
    missing = [d for d in want if d not in seen] if unit["device_ids"] == "exact" else []
    if missing:
        out.append(
            fail(
                "devices",
                f"/dev/davinci{missing[0]} is missing ({len(missing)} of {len(want)} devices); "
                f"start the container with --device=/dev/davinci{missing[0]} (each of the layout)",
            )
        )
    for name in CONTROL_DEVICES:
        if not os.path.exists(node.path(f"/dev/{name}")):
            out.append(fail("devices", f"/dev/{name} is missing; add --device=/dev/{name}"))
    per_node = spec["devices_per_node"]
    if not out and per_node and unit["device_ids"] == "exact" and len(seen) != per_node:
        found = f"{len(seen)} NPUs here, the layout is for {per_node}-device nodes"
        out.append(warn("devices", f"{found} ({spec['platform']})"))
    if not failed(out):
        out.append(ok("devices", f"{len(used)} NPUs present ({span(used)})"))
    return out, used


def find_tools(node: Node, platform: str) -> tuple[list[Check], dict[str, str]]:
    """hccn_tool and npu-smi (the host driver's tools) and the driver itself."""
    if platform not in ASCEND:
        return [], {}
    out: list[Check] = []
    tools: dict[str, str] = {}
    for name, places, mount in (
        ("hccn_tool", HCCN_TOOL_PATHS, MOUNT_DRIVER),
        ("npu-smi", NPU_SMI_PATHS, MOUNT_NPU_SMI),
    ):
        found = node.tool(name, places)
        if found is None:
            where = " or ".join(os.path.dirname(p) for p in places[:2])
            out.append(fail("tools", f"{name} not found in PATH, {where}; it ships with the host "
                            f"NPU driver: mount it into the container ({mount})"))  # fmt: skip
        else:
            tools[name] = found
    if not os.path.isdir(node.path(DRIVER_DIR)):
        out.append(fail("tools", f"{DRIVER_DIR} is missing; the engines load the driver's "
                        f"libraries from it: mount it ({MOUNT_DRIVER})"))  # fmt: skip
    if not out:
        out.append(ok("tools", "hccn_tool, npu-smi and the driver present"))
    return out, tools


def check_npu_smi(
    node: Node, smi: str | None, platform: str, devices: Sequence[int]
) -> list[Check]:
    """Each device healthy and free: no process holds its memory (npu-smi info)."""
    if smi is None or not devices:
        return []
    status, text = node.run([smi, "info"])
    if status != 0:
        return [fail("busy", f"npu-smi info failed ({status}): {text.strip()[:120]}")]
    health, procs = parse_npu_smi(text, CHIPS_PER_NPU.get(platform, 1))
    out: list[Check] = []
    for d in devices:
        state = health.get(d)
        if state is not None and state != "OK":
            out.append(fail("health", f"NPU {d} health is {state} (npu-smi info)"))
        for pid, name, mem in procs.get(d, []):
            out.append(fail("busy", f"NPU {d} is busy: process {pid} ({name}) holds {mem} MB "
                            "of its memory; stop it before launching"))  # fmt: skip
    if not health:
        out.append(warn("health", "npu-smi info showed no device table"))
    elif not failed(out, "health"):
        out.append(ok("health", f"NPUs {span(devices)} OK"))
    if not failed(out, "busy"):
        out.append(ok("busy", f"no process holds the memory of NPUs {span(devices)}"))
    return out


def _link_query(query: str, device: int, status: int, text: str, facts: Doc) -> list[Check]:
    """What one of the guide's single-node queries says about one NPU."""
    where = f"hccn_tool -i {device} -{query} -g"
    if status != 0:
        level = WARN if query == "lldp" else FAIL
        return [
            check(query, level, f"NPU {device}: {where} failed ({status}): {text.strip()[:120]}")
        ]
    if query == "link":
        state = parse_link(text)
        facts["link"] = state
        if state != "UP":
            return [fail("link", f"NPU {device}: link status {state or '?'} ({where}); must be UP")]
    elif query == "net_health":
        state = parse_net_health(text)
        if (state or "").lower() != "success":
            why = f"NPU {device}: net health status {state or '?'} ({where}); must be Success"
            return [fail("net_health", why)]
    elif query == "lldp":
        facts["ifname"] = parse_ifname(text)
        if facts["ifname"] is None:
            return [warn("lldp", f"NPU {device}: no switch port (Ifname) in {where}")]
    elif query == "netdetect":
        facts["netdetect"] = parse_detect(text)
    else:
        facts["gateway"] = parse_any_ip(text)
    return []


def hccn_device(node: Node, hccn: str, platform: str, device: int) -> tuple[list[Check], Doc]:
    """The guide's single-node checks on one NPU, and its address, mask and TLS switch."""
    out: list[Check] = []
    facts: Doc = {}
    for query in LINK_QUERIES:
        status, text = node.run([hccn, "-i", str(device), "-" + query, "-g"])
        out += _link_query(query, device, status, text, facts)
    status, text = node.run([hccn, "-i", str(device), IP_OF[platform], "-g"])
    facts["ip"] = parse_ipaddr(text) if status == 0 else None
    facts["netmask"] = parse_netmask(text) if status == 0 else None
    if facts["ip"] is None:
        out.append(fail("npu_ip", f"NPU {device}: no address from hccn_tool -i {device} "
                        f"{IP_OF[platform]} -g ({status}); configure its NPU IP"))  # fmt: skip
    status, text = node.run([hccn, "-i", str(device), "-tls", "-g"])
    facts["tls"] = parse_tls_switch(text) if status == 0 else None
    if facts["tls"] is None:
        why = f"NPU {device}: no TLS switch in hccn_tool -i {device} -tls -g ({status}), so it "
        out.append(warn("tls", why + "cannot be compared with the other nodes; 'permission "
                        "denied' means the container lacks device admin rights"))  # fmt: skip
    return out, facts


def check_hccn(
    node: Node, hccn: str | None, platform: str, devices: Sequence[int]
) -> tuple[list[Check], Doc]:
    """HCCN links and health, NPU IPs and TLS switches of every device, in parallel."""
    facts: Doc = {"npu_ips": {}, "netmasks": {}, "tls": {}, "ifnames": {}}
    if hccn is None or platform not in ASCEND or not devices:
        return [], facts
    out: list[Check] = []
    with concurrent.futures.ThreadPoolExecutor(min(WORKERS, len(devices))) as pool:
        results = list(pool.map(lambda d: hccn_device(node, hccn, platform, d), devices))
    for d, (found, got) in zip(devices, results):  # noqa: B905 (Python 3.8 has no strict=)
        out += found
        for key, fact in (("ip", "npu_ips"), ("netmask", "netmasks"), ("tls", "tls"),
                          ("ifname", "ifnames")):  # fmt: skip
            if got.get(key) is not None:
                facts[fact][str(d)] = got[key]
    facts["down"] = [d for d, (_, got) in zip(devices, results) if got.get("link") != "UP"]  # noqa: B905
    for name in ("link", "net_health", "netdetect", "gateway", "npu_ip", "tls"):
        if not any(c["check"] == name for c in out):
            out.append(ok(name, f"NPUs {span(devices)}"))
    return out, facts


def check_superpod(
    node: Node, smi: str | None, platform: str, devices: Sequence[int]
) -> tuple[list[Check], Doc]:
    """A3: each chip's super pod ID and SDID (npu-smi info -t spod-info -i CARD -c CHIP)."""
    facts: Doc = {"superpod": {}, "sdid": {}}
    if platform != "a3" or smi is None or not devices:
        return [], facts
    out: list[Check] = []
    for d in devices:
        card, chip = divmod(d, CHIPS_PER_NPU["a3"])
        status, text = node.run([smi, "info", "-t", "spod-info", "-i", str(card), "-c", str(chip)])
        pod, sdid = parse_spod(text) if status == 0 else (None, None)
        if pod is None:
            where = f"npu-smi info -t spod-info -i {card} -c {chip}"
            out.append(fail("superpod", f"NPU {d}: no Super Pod ID from {where} ({status})"))
            continue
        facts["superpod"][str(d)] = pod
        if sdid is not None:
            facts["sdid"][str(d)] = sdid
    pods = sorted(set(facts["superpod"].values()))
    if len(pods) > 1:
        out.append(warn("superpod", f"NPUs of this node are in super pods {pods}"))
    if not any(c["check"] == "superpod" for c in out):
        out.append(ok("superpod", f"super pod {pods[0] if pods else '?'}"))
    return out, facts


def check_hccn_conf(node: Node, platform: str) -> tuple[list[Check], dict[str, str]]:
    """``/etc/hccn.conf``, read to compare the nodes' HCCN settings."""
    if platform not in ASCEND:
        return [], {}
    try:
        with open(node.path(HCCN_CONF), "rb") as f:
            text = f.read(MAX_TOOL_BYTES).decode("utf-8", "replace")
    except OSError:
        why = f"{HCCN_CONF} not found; mount it from the host ({MOUNT_HCCN_CONF}) so the "
        return [warn("hccn_conf", why + "nodes' HCCN settings can be compared")], {}
    settings = parse_hccn_conf(text)
    return [ok("hccn_conf", f"{len(settings)} settings")], settings


def port_taken(address: str, port: int) -> str | None:
    """Why ``port`` cannot be bound on ``address`` now, or None when it is free."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    finally:
        sock.close()
    return None


def check_ports(spec: Doc, unit: Doc, address: str) -> list[Check]:
    """Every port this unit's processes bind is free here and outside reserved ranges."""
    out: list[Check] = []
    reserved = spec["reserved"]
    ports = sorted(set(unit["ports"]))
    for port, owner in ports:
        if reserved is not None and reserved[0] <= port < reserved[1]:
            out.append(warn("reserved", f"port {port} ({owner}) lies in [{reserved[0]}, "
                            f"{reserved[1]}), where AscendDirectTransport takes ports at random"))  # fmt: skip
        why = port_taken(address, port)
        if why is not None:
            out.append(fail("ports", f"port {port} ({owner}) is taken on {address} ({why}); "
                            f"stop what listens there (ss -ltnp | grep :{port})"))  # fmt: skip
    if not failed(out, "ports"):
        out.append(ok("ports", f"{len(ports)} ports free on {address}"))
    return out


def _read_json(path: str, limit: int) -> tuple[object, str]:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        return None, f"is not readable ({type(exc).__name__})"
    if len(data) > limit:
        return None, f"is larger than {limit >> 20} MiB"
    try:
        return json.loads(data.decode("utf-8")), ""
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, f"is not JSON ({type(exc).__name__})"


def _nonempty(path: str) -> bool:
    try:
        return os.path.isfile(path) and os.path.getsize(path) > 0 and os.access(path, os.R_OK)
    except OSError:
        return False


def _shards(folder: str, names: list[str], problems: list[str]) -> list[str]:
    """The weight files the engine reads: those the indexes name, else every safetensors."""
    indexes = [n for n in names if n.endswith(".safetensors.index.json")]
    shards: list[str] = []
    if not indexes:
        shards = [n for n in names if n.endswith(".safetensors")]
        if not shards:
            problems.append("has no weights (*.safetensors or a *.safetensors.index.json)")
        return shards
    for index in indexes:
        doc, why = _read_json(os.path.join(folder, index), MAX_INDEX_BYTES)
        weights = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(weights, dict):
            problems.append(f"{index} {why or 'has no weight_map'}")
            continue
        shards += sorted({v for v in weights.values() if isinstance(v, str)})
    return shards


def model_problems(folder: str) -> list[str]:
    """What the engine would miss in ``folder``: config.json, a tokenizer, every weight shard."""
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        return [f"{what}; mount the weights there (the engines read the model from this path)"]
    try:
        names = sorted(os.listdir(folder)[:MAX_DIR_ENTRIES])
    except OSError as exc:
        return [f"cannot be listed ({type(exc).__name__}); fix its permissions (chmod -R a+rX)"]
    problems: list[str] = []
    config, why = _read_json(os.path.join(folder, "config.json"), MAX_CONFIG_BYTES)
    if not isinstance(config, dict):
        problems.append(f"config.json {why or 'is not a JSON object'}")
    if not any(_nonempty(os.path.join(folder, n)) for n in TOKENIZER_FILES if n in names):
        problems.append("has no tokenizer (tokenizer.json, tokenizer.model, tokenizer_config.json)")
    shards = _shards(folder, names, problems)
    missing = [s for s in shards if "/" in s or not _nonempty(os.path.join(folder, s))]
    if missing:
        listed = ", ".join(clean(s, 60) for s in missing[:3])
        problems.append(f"misses {len(missing)} of {len(shards)} weight files ({listed})")
    return problems


def check_model(node: Node, spec: Doc, unit: Doc) -> list[Check]:
    """The model folder holds what the engines read (on units that run an engine)."""
    path = spec["model_path"]
    if not unit["model"] or not path:
        return []
    problems = model_problems(node.path(path))
    if problems:
        return [fail("model", f"model {path} {p}") for p in problems]
    return [ok("model", f"{path}: config.json, tokenizer and weights present")]


def driver_version(node: Node) -> str | None:
    try:
        with open(node.path(DRIVER_VERSION), "rb") as f:
            return parse_driver_version(f.read(65536).decode("utf-8", "replace"))
    except OSError:
        return None


def local_checks(node: Node, spec: Doc, unit: Doc, bind_ports: str) -> tuple[list[Check], Doc]:
    """Everything this unit can check alone, and the facts its peers need."""
    platform = spec["platform"]
    checks, tools = find_tools(node, platform)
    found, devices = check_devices(node, spec, unit)
    checks += found
    checks += check_npu_smi(node, tools.get("npu-smi"), platform, devices)
    hccn_checks, facts = check_hccn(node, tools.get("hccn_tool"), platform, devices)
    pod_checks, pods = check_superpod(node, tools.get("npu-smi"), platform, devices)
    conf_checks, conf = check_hccn_conf(node, platform)
    checks += hccn_checks + pod_checks + conf_checks
    checks += check_ports(spec, unit, bind_ports)
    checks += check_model(node, spec, unit)
    facts.update(pods)
    facts["hccn_conf"] = conf
    facts["devices"] = list(devices)
    facts["driver"] = driver_version(node) if platform in ASCEND else None
    facts["tools"] = {k: os.path.basename(v) for k, v in tools.items()}
    return checks, facts


# ---------------------------------------------------------------- pings


def ping_targets(
    devices: Sequence[int], peer_ips: Mapping[str, object]
) -> list[tuple[int, int, str]]:
    """(local NPU, peer NPU, its IP): each local NPU pings the peer's NPU at its own
    position (the rail it talks to), cycling over the shorter list."""
    theirs = sorted((int(k), str(v)) for k, v in peer_ips.items() if k.isdigit() and is_ip(str(v)))
    if not theirs or not devices:
        return []
    picks = [theirs[i % len(theirs)] for i in range(len(devices))]
    return [(d, t, ip) for d, (t, ip) in zip(sorted(devices), picks)]  # noqa: B905


def _ping_work(
    unit: Doc, devices: Sequence[int], peer_docs: Mapping[str, Doc | None]
) -> tuple[list[Check], dict[int, list[tuple[str, int, str]]]]:
    """Per local NPU, what it pings; a warning for a peer that published no NPU IP."""
    out: list[Check] = []
    work: dict[int, list[tuple[str, int, str]]] = {}
    for name, why in unit["peers"]:
        doc = peer_docs.get(name) or {}
        if doc.get("serving"):
            out.append(warn("peers", f"{name} ({why}) is already serving: not pinged"))
            continue
        ips = doc.get("facts", {}).get("npu_ips") if isinstance(doc.get("facts"), dict) else None
        targets = ping_targets(devices, ips if isinstance(ips, dict) else {})
        if not targets:
            out.append(warn("peers", f"{name} ({why}) published no NPU IP to ping; see its rows"))
        for d, theirs, ip in targets:
            work.setdefault(d, []).append((name, theirs, ip))
    return out, work


def ping_peers(
    node: Node, spec: Doc, unit: Doc, devices: Sequence[int], peer_docs: Mapping[str, Doc | None]
) -> tuple[list[Check], list[Doc]]:
    """Reach the NPU IPs of every peer (A2 -ping, A3 -hccs_ping), one thread per local NPU."""
    platform = spec["platform"]
    if not unit["peers"]:
        return [check("peers", SKIP, "no peer: this unit exchanges no KV or collectives")], []
    if platform not in ASCEND:
        reached = [n for n, _ in unit["peers"] if peer_docs.get(n) is not None]
        level = OK if len(reached) == len(unit["peers"]) else FAIL
        what = f"reached {len(reached)} of {len(unit['peers'])} peers over the host network"
        return [check("peers", level, f"{what} (no NPU fabric to test)")], []
    hccn = node.tool("hccn_tool", HCCN_TOOL_PATHS)
    if hccn is None:
        return [fail("peers", "cannot ping the peers: hccn_tool is missing")], []
    out, work = _ping_work(unit, devices, peer_docs)
    flag = PING_OF[platform]

    labels = {u["name"]: u["label"] for u in spec["units"]}

    def ping_from(d: int) -> list[Doc]:
        done = []
        for name, theirs, ip in work[d]:
            status, text = node.run([hccn, "-i", str(d), flag, "-g", "address", ip], PING_TIMEOUT_S)
            done.append({"peer": name, "device": theirs, "from": d, "address": ip,
                         "to": f"{labels.get(name, name)} NPU {theirs}",
                         "ok": parse_ping(status, text), "detail": clean(text.strip(), 160)})  # fmt: skip
        return done

    pings: list[Doc] = []
    if work:
        with concurrent.futures.ThreadPoolExecutor(min(WORKERS, len(work))) as pool:
            for result in pool.map(ping_from, sorted(work)):
                pings += result
    for p in pings:
        if not p["ok"]:
            how = f"hccn_tool -i {p['from']} {flag} -g address {p['address']}"
            out.append(fail("peers", f"NPU {p['from']} cannot reach {p['to']} at {p['address']} "
                            f"({how}: {p['detail'][:80]})"))  # fmt: skip
    if not failed(out):
        count = sum(1 for p in pings if p["ok"])
        out.append(ok("peers", f"{count} pings reached {len(unit['peers'])} peers' NPU IPs"))
    return out, pings
