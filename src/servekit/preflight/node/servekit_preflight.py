"""servekit's preflight on one node, shipped beside the scripts as ``servekit_preflight.py``.

The engine image is the only interpreter a node has, so this file is standard
library only, in syntax Python 3.8 reads, like the rank-table reader. The
rendered entry runs it before any engine starts::

    python3 servekit_preflight.py run SPEC --unit NAME [--addresses "A0 A1 ..."]
        [--listen ADDR] [--bind-ports ADDR]
    python3 servekit_preflight.py local SPEC --unit NAME [--bind-ports ADDR]
    python3 servekit_preflight.py report DIR

``SPEC`` (``servekit_preflight.json``, rendered from the Plan) says what each
unit (a node; a pod on Kubernetes) needs: its devices, the ports it binds, the
model it reads, the units it exchanges KV or collectives with. ``run`` checks
this unit (the checks the source's ``check_hccn.sh`` runs, following the
vLLM-Ascend PD multi-node guide, and more), publishes the result, pings the NPU
IPs of its peers, gathers every unit's result (over HTTP on the nodes'
addresses, or through a shared folder), compares them and prints one table:
exit 0 when the deployment may start, 1 when a check that matters failed (the
last lines say which node and why), 2 for a wrong command line or spec.
``local`` prints this unit's own checks as JSON; ``report`` compares the
results found in a folder.

The environment may set ``PREFLIGHT_ROOT`` (the folder that stands for ``/``:
a dry run plays each node's filesystem with it), ``PREFLIGHT_TIMEOUT`` (s to
wait for the other units, default 600), ``PREFLIGHT_PORT`` (the exchange port,
default the spec's), ``PREFLIGHT_DIR`` (a shared folder: exchange there, not
over HTTP) and ``LOG_DIR`` (where the results and the report are written).
Nothing read from a tool, a file or a peer is executed; every read is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

try:  # inside servekit
    from . import servekit_preflight_probe as probe, servekit_preflight_share as share
except ImportError:  # shipped: the parts sit beside this file
    import servekit_preflight_probe as probe  # type: ignore[no-redef, import-not-found]
    import servekit_preflight_share as share  # type: ignore[no-redef, import-not-found]

if TYPE_CHECKING:
    from .servekit_preflight_probe import Doc

SPEC_SCHEMA = "servekit.preflight/1"
MAX_SPEC_BYTES = 4 << 20
DEFAULT_TIMEOUT_S = 600.0
FILES = ("servekit_preflight.py", "servekit_preflight_probe.py", "servekit_preflight_share.py")
_UNIT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
OK, FAIL = probe.OK, probe.FAIL
MAX_ITEMS = probe.MAX_ITEMS
clean = probe.clean


class SpecError(Exception):
    """The spec or the command line cannot be used (exit 2)."""


# ---------------------------------------------------------------- the spec


def _int(value: object, what: str, low: int = 0, high: int = 1 << 31) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SpecError(f"{what} is not a whole number in [{low}, {high}]")
    return value


def _str(value: object, what: str) -> str:
    if not isinstance(value, str) or len(value) > 4096:
        raise SpecError(f"{what} is not a string")
    return value


def _unit(raw: object, i: int) -> Doc:
    if not isinstance(raw, dict):
        raise SpecError(f"units[{i}] is not an object")
    name = _str(raw.get("name"), f"units[{i}].name")
    if not _UNIT.match(name):
        raise SpecError(f"units[{i}].name {clean(name, 80)!r} is not a unit name")
    devices = raw.get("devices") or []
    ports = raw.get("ports") or []
    peers = raw.get("peers") or []
    if not isinstance(devices, list) or not isinstance(ports, list) or not isinstance(peers, list):
        raise SpecError(f"units[{i}]: devices, ports and peers are lists")
    address = raw.get("address")
    return {
        "name": name,
        "label": clean(raw.get("label") or name, 80),
        "node": _int(raw.get("node", i), f"units[{i}].node", 0, 1 << 16),
        "address": None if address is None else _str(address, f"units[{i}].address"),
        "devices": [_int(d, f"units[{i}].devices", 0, 4095) for d in devices],
        "device_ids": "visible" if raw.get("device_ids") == "visible" else "exact",
        "ports": [
            (_int(p[0], f"units[{i}].ports", 1, 65535), clean(p[1], 120))
            for p in ports
            if isinstance(p, list) and len(p) == 2
        ],
        "model": bool(raw.get("model", False)),
        "peers": [
            (_str(p[0], f"units[{i}].peers"), clean(p[1], 120))
            for p in peers
            if isinstance(p, list) and len(p) == 2
        ],
    }


def parse_spec(data: bytes) -> Doc:
    """The spec as checked values, or :class:`SpecError` saying what is wrong."""
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError("the spec is larger than 4 MiB")
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SpecError(f"the spec is not JSON ({type(exc).__name__})") from None
    if not isinstance(raw, dict) or raw.get("schema") != SPEC_SCHEMA:
        raise SpecError(f"the spec is not a {SPEC_SCHEMA} document")
    units_raw = raw.get("units")
    if not isinstance(units_raw, list) or not units_raw or len(units_raw) > MAX_ITEMS:
        raise SpecError("the spec lists no units")
    units = [_unit(u, i) for i, u in enumerate(units_raw)]
    names = [u["name"] for u in units]
    if len(set(names)) != len(names):
        raise SpecError("two units share a name")
    for u in units:
        u["peers"] = [(n, why) for n, why in u["peers"] if n in names and n != u["name"]]
    reserved = raw.get("reserved")
    span = None
    if isinstance(reserved, list) and len(reserved) == 2:
        span = (_int(reserved[0], "reserved", 0, 65536), _int(reserved[1], "reserved", 0, 65536))
    platform = raw.get("platform")
    return {
        "layout": clean(_str(raw.get("layout"), "layout"), 200),
        "platform": platform if platform in ("a2", "a3", "nvidia", "cpu") else "cpu",
        "accelerator": clean(raw.get("accelerator") or "", 40),
        "devices_per_node": _int(raw.get("devices_per_node", 0), "devices_per_node", 0, 4096),
        "reserved": span,
        "port": _int(raw.get("port"), "port", 1, 65535),
        "model_path": _str(raw.get("model_path", ""), "model_path"),
        "units": units,
    }


def read_spec(path: str) -> Doc:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"cannot read the spec {path} ({type(exc).__name__})") from None
    return parse_spec(data)


def unit_of(spec: Doc, name: str) -> Doc:
    for u in spec["units"]:
        if u["name"] == name:
            found: Doc = u
            return found
    raise SpecError(f"--unit {clean(name, 80)!r} is not a unit of {spec['layout']}")


# ---------------------------------------------------------------- commands


def addresses_of(spec: Doc, given: str) -> dict[str, str]:
    """Unit -> the address the others reach it at: the spec's, else ``given`` by node."""
    listed = given.split()
    found: dict[str, str] = {}
    for u in spec["units"]:
        if u["address"]:
            found[u["name"]] = u["address"]
        elif u["node"] < len(listed) and listed[u["node"]] != "-":  # "-": not given
            found[u["name"]] = listed[u["node"]]
    return found


def env_number(name: str, default: float, high: float) -> float:
    """A whole number from the environment (digits only), or ``default`` when unset."""
    raw = os.environ.get(name, "")
    if not raw:
        return default
    if not re.match(r"^[1-9][0-9]{0,8}$", raw) or int(raw) > high:
        raise SpecError(f"{name}={clean(raw, 20)!r} is not a whole number in [1, {high:g}]; "
                        "set it to digits only")  # fmt: skip
    return float(raw)


def run_unit(spec: Doc, name: str, addresses: str = "", **how: Any) -> int:
    """The whole preflight of one unit: check, publish, ping, gather, compare, report.

    ``listen``: the address this unit serves its results on; ``bind_ports``: the
    address the engines bind (each port is tried there); ``node``: this node's
    filesystem and tools (default ``/``, or ``PREFLIGHT_ROOT``); ``timeout``,
    ``port``, ``shared``, ``log_dir``: PREFLIGHT_TIMEOUT, PREFLIGHT_PORT,
    PREFLIGHT_DIR, LOG_DIR when not given.
    """
    unit = unit_of(spec, name)
    node = how.get("node") or probe.Node(os.environ.get("PREFLIGHT_ROOT", "/"))
    listen, bind_ports = how.get("listen") or "0.0.0.0", how.get("bind_ports") or "0.0.0.0"
    timeout = how.get("timeout") or env_number("PREFLIGHT_TIMEOUT", DEFAULT_TIMEOUT_S, 86400)
    port = int(how.get("port") or env_number("PREFLIGHT_PORT", spec["port"], 65535))
    shared = how.get("shared") or os.environ.get("PREFLIGHT_DIR") or None
    found = addresses_of(spec, addresses)
    others = [u["name"] for u in spec["units"] if u["name"] != name]
    missing = [u for u in others if u not in found]
    if shared is None and missing:
        raise SpecError(f"no address for {', '.join(missing[:4])}: give --addresses (one per "
                        "node, in node order) or PREFLIGHT_DIR (a folder every node shares)")  # fmt: skip
    started = time.time()
    share.say(f"preflight: checking {unit['label']} of {spec['layout']} "
              f"({len(spec['units'])} units; PREFLIGHT=0 skips it)")  # fmt: skip
    checks, facts = probe.local_checks(node, spec, unit, bind_ports)
    me = {"address": found.get(name) or listen, "started": started}
    try:
        exchange = share.Exchange(spec, name, found, port=port, shared=shared, listen=listen,
                                  started=started, timeout=timeout)  # fmt: skip
    except OSError as exc:
        share.say(f"preflight FAILED: {unit['label']}: the exchange port {port} on {listen} "
                  f"cannot be bound ({exc.strerror or type(exc).__name__}); set PREFLIGHT_PORT "
                  "to a port free on every node")  # fmt: skip
        return 1
    try:
        exchange.publish(
            "local", share.node_doc(spec, unit, "local", checks=checks, facts=facts, **me)
        )
        peers = exchange.gather([n for n, _ in unit["peers"]], "local") if unit["peers"] else {}
        more, pings = probe.ping_peers(node, spec, unit, facts.get("devices", []), peers)
        final = share.node_doc(
            spec, unit, "final", checks=checks + more, facts=facts, pings=pings, **me
        )
        exchange.publish("final", final)
        docs: dict[str, Doc | None] = dict(exchange.gather(others, "final"))
        docs[name] = final
        report = share.compare(spec, docs, timeout)
        first = spec["units"][0]["name"] == name
        folder = share.save(
            how.get("log_dir") or os.environ.get("LOG_DIR"),
            spec["layout"],
            final,
            report if first else None,
        )
        sys.stdout.write(share.report_text(report))
        if folder:
            share.say(f"preflight results in {folder}")
        share.say(share.verdict_line(report))
        exchange.finish(others)
    finally:
        exchange.close()
    return 0 if report["verdict"] == OK else 1


def _unit_file(fname: str) -> str | None:
    """The unit a result file belongs to: ``<unit>.json`` (LOG_DIR) or ``<unit>.final.json``
    (a shared folder); None for the report and for a unit's local results."""
    for suffix in (".final.json", ".json"):
        if fname.endswith(suffix):
            stem = fname[: -len(suffix)]
            break
    else:
        return None
    if stem == "report" or stem.endswith(".local") or not _UNIT.match(stem):
        return None
    return stem


def report_folder(folder: str, spec: Doc | None = None) -> Doc:
    """The report of the unit results found in ``folder`` (from LOG_DIR or a shared folder)."""
    try:
        names = sorted(os.listdir(folder))[:MAX_ITEMS]
    except OSError as exc:
        raise SpecError(f"cannot list {folder} ({type(exc).__name__})") from None
    docs: dict[str, Doc | None] = {}
    for fname in names:
        unit = _unit_file(fname)
        if unit is None:
            continue
        try:
            with open(os.path.join(folder, fname), "rb") as f:
                doc = share.read_doc(f.read(share.MAX_DOC_BYTES + 1), unit, "final")
        except OSError:
            doc = None
        if doc is not None:
            docs[unit] = doc
    if spec is None:
        if not docs:
            raise SpecError(f"{folder} holds no preflight results (<unit>.json)")
        ordered = sorted(docs.items(), key=lambda kv: (kv[1] or {}).get("node", 0))
        first = ordered[0][1] or {}
        units: list[Doc] = [{"name": u, "label": (d or {}).get("label") or u, "node": i, "peers": []}
                 for i, (u, d) in enumerate(ordered)]  # fmt: skip
        spec = {"layout": clean(first.get("layout", "?"), 200), "units": units,
                "platform": clean(first.get("platform", "?"), 20)}  # fmt: skip
    return share.compare(spec, docs, 0)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="servekit_preflight.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command")
    run = sub.add_parser("run", help="check this unit, gather every unit's result, compare")
    local = sub.add_parser("local", help="print this unit's own checks as JSON")
    for q in (run, local):
        q.add_argument("spec")
        q.add_argument("--unit", required=True)
        q.add_argument("--bind-ports", default="0.0.0.0", help="the address the engines bind")
    run.add_argument("--addresses", default="", help="every node's address, in node order")
    run.add_argument("--listen", default="0.0.0.0", help="the address to serve results on")
    rep = sub.add_parser("report", help="compare the unit results found in a folder")
    rep.add_argument("folder")
    return p


def _local(spec: Doc, name: str, bind_ports: str) -> int:
    unit = unit_of(spec, name)
    node = probe.Node(os.environ.get("PREFLIGHT_ROOT", "/"))
    checks, facts = probe.local_checks(node, spec, unit, bind_ports)
    doc = share.node_doc(spec, unit, "local", checks=checks, facts=facts,
                         address=bind_ports, started=time.time())  # fmt: skip
    sys.stdout.write(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 1 if probe.failed(checks) else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0: the deployment may start; 1: a check that matters failed; 2: bad input."""
    args = parser().parse_args(argv)
    try:
        if args.command == "run":
            spec = read_spec(args.spec)
            return run_unit(spec, args.unit, args.addresses, listen=args.listen,
                            bind_ports=args.bind_ports)  # fmt: skip
        if args.command == "local":
            return _local(read_spec(args.spec), args.unit, args.bind_ports)
        if args.command == "report":
            report = report_folder(args.folder)
            sys.stdout.write(share.report_text(report))
            return 0 if report["verdict"] == OK else 1
    except SpecError as exc:
        sys.stderr.write(f"[servekit] preflight: {exc}\n")
        return 2
    parser().print_usage(sys.stderr)
    return 2


def source_bytes(name: str = "servekit_preflight.py") -> bytes:
    """The bytes of one of the preflight's files (what the renderer writes beside the scripts)."""
    if name not in FILES:
        raise ValueError(f"{name} is not one of the preflight's files")
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name), "rb") as f:
        return f.read()


if __name__ == "__main__":
    sys.exit(main())
