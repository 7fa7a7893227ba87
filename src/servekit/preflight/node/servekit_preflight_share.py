"""The units' results, exchanged and compared: one report across the nodes.

Part of servekit's preflight, shipped beside the scripts as
``servekit_preflight_share.py`` (standard library, Python 3.8 syntax). Each unit
serves its results over HTTP on its own address (the rank table's, on
ModelArts) while the others gather them, or writes them to a folder every node
shares; a peer's document is read bounded, checked field by field and cleaned
before anything of it is printed. :func:`compare` turns every unit's results
into one report naming each failure and each difference between nodes that
must not be.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

try:  # inside servekit
    from . import servekit_preflight_probe as probe
except ImportError:  # shipped: the probe sits beside this file
    import servekit_preflight_probe as probe  # type: ignore[no-redef, import-not-found]

if TYPE_CHECKING:
    from .servekit_preflight_probe import Check, Doc

NODE_SCHEMA = "servekit.preflight.node/1"
REPORT_SCHEMA = "servekit.preflight.report/1"
MAX_DOC_BYTES = 4 << 20
FETCH_TIMEOUT_S = 5.0
POLL_S = 0.5
LINGER_S = 60.0
PATH_PREFIX = "/servekit-preflight/v1/"
PHASES = ("local", "final")
OK, WARN, FAIL, SKIP = probe.OK, probe.WARN, probe.FAIL, probe.SKIP
MAX_ITEMS = probe.MAX_ITEMS
clean, check = probe.clean, probe.check


# ---------------------------------------------------------------- documents


def node_doc(spec: Doc, unit: Doc, phase: str, **parts: Any) -> Doc:
    """One unit's results of a phase: ``address``, ``started``, ``checks``, ``facts``, ``pings``."""
    return {
        "schema": NODE_SCHEMA,
        "layout": spec["layout"],
        "unit": unit["name"],
        "label": unit["label"],
        "node": unit["node"],
        "host": clean(socket.gethostname(), 120),
        "phase": phase,
        "platform": spec["platform"],
        "pings": [],
        **parts,
    }


def _checks(raw: object) -> list[Check]:
    items = raw if isinstance(raw, list) else []
    return [
        check(
            clean(c.get("check"), 40),
            c["level"] if c.get("level") in probe.LEVELS else FAIL,
            clean(c.get("detail", "")),
        )
        for c in items[:MAX_ITEMS]
        if isinstance(c, dict)
    ]


def valid_doc(raw: object, unit: str, phase: str) -> Doc | None:
    """A peer's document, checked and cleaned; None when it is not one of (unit, phase)."""
    if not isinstance(raw, dict) or raw.get("schema") != NODE_SCHEMA or raw.get("unit") != unit:
        return None
    if raw.get("phase") not in PHASES or (phase == "final" and raw.get("phase") != "final"):
        return None
    if not isinstance(raw.get("checks"), list) or not isinstance(raw.get("facts"), dict):
        return None
    doc = dict(raw)
    doc["checks"] = _checks(raw["checks"])
    pings = raw.get("pings")
    doc["pings"] = [p for p in (pings if isinstance(pings, list) else [])[:MAX_ITEMS]
                    if isinstance(p, dict)]  # fmt: skip
    for key in ("label", "address", "host"):
        doc[key] = clean(raw.get(key, ""), 120)
    started = raw.get("started")
    doc["started"] = float(started) if isinstance(started, (int, float)) else 0.0
    node = raw.get("node")
    doc["node"] = node if isinstance(node, int) and not isinstance(node, bool) else 0
    return doc


def read_doc(data: bytes, unit: str, phase: str) -> Doc | None:
    if len(data) > MAX_DOC_BYTES:
        return None
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return valid_doc(raw, unit, phase)


def write_json(path: str, doc: Doc) -> None:
    """Write ``doc`` to ``path`` whole or not at all (a temp file, then a rename)."""
    write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def write_text(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------- exchange


class Board:
    """This unit's results, served over HTTP to the other units while they gather."""

    def __init__(self, listen: str, port: int, units: Sequence[str]) -> None:
        self.docs: dict[str, bytes] = {}
        self.fetched: dict[str, set[str]] = {p: set() for p in PHASES}
        self.units = set(units)
        self.lock = threading.Lock()
        handler = _handler(self)
        family = socket.AF_INET6 if ":" in listen else socket.AF_INET

        class Server(http.server.ThreadingHTTPServer):
            address_family = family
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server((listen, port), handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def answer(self, path: str) -> bytes | None:
        """The document a GET of ``path`` asks for (noting who fetched it), or None."""
        url = urllib.parse.urlsplit(path[:512])
        phase = url.path[len(PATH_PREFIX) :] if url.path.startswith(PATH_PREFIX) else ""
        asker = urllib.parse.parse_qs(url.query).get("from", [""])[0]
        with self.lock:
            body = self.docs.get(phase)
            if body is not None and asker in self.units:
                self.fetched[phase].add(asker)
        return body

    def publish(self, phase: str, doc: Doc) -> None:
        with self.lock:
            self.docs[phase] = json.dumps(doc).encode("utf-8")

    def wait_fetched(self, others: Iterable[str], limit: float) -> None:
        """Serve until every other unit has fetched this unit's final result (or ``limit``)."""
        want = set(others)
        until = time.monotonic() + limit
        while time.monotonic() < until:
            with self.lock:
                if want <= self.fetched["final"]:
                    return
            time.sleep(0.1)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(board: Board) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = 10

        def do_GET(self) -> None:
            body = board.answer(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def answers_health(host: str, port: int) -> bool:
    """Whether an API server answers ``GET /health`` with 200 there (a unit serving)."""
    where = f"[{host}]" if ":" in host else host
    try:
        with _OPENER.open(f"http://{where}:{port}/health", timeout=FETCH_TIMEOUT_S) as resp:
            return int(resp.status) == 200
    except (OSError, ValueError, urllib.error.URLError):
        return False


def serving_doc(unit: Doc, phase: str, address: str) -> Doc:
    """The results of a unit that is already serving: its engines answer, it was checked
    when it started (a pod recreated alone finds its peers running)."""
    why = "already serving (its API answers /health): checked when it started, not again now"
    return {
        "schema": NODE_SCHEMA,
        "unit": unit["name"],
        "label": unit["label"],
        "node": unit["node"],
        "phase": phase,
        "address": address,
        "started": 0.0,
        "checks": [probe.warn("report", why)],
        "facts": {},
        "pings": [],
        "serving": True,
    }


def fetch_doc(host: str, port: int, unit: str, phase: str, me: str) -> Doc | None:
    """One try at ``unit``'s document of ``phase`` (never through an HTTP proxy)."""
    where = f"[{host}]" if ":" in host else host
    query = urllib.parse.urlencode({"from": me})
    url = f"http://{where}:{port}{PATH_PREFIX}{phase}?{query}"
    try:
        with _OPENER.open(url, timeout=FETCH_TIMEOUT_S) as resp:
            data = resp.read(MAX_DOC_BYTES + 1)
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return read_doc(data, unit, phase)


class Exchange:
    """How the units see each other's results: HTTP on their addresses, or a shared folder.

    ``where``: unit -> address; ``shared``: the folder (None: HTTP); ``listen``
    and ``port``: where this unit serves; ``started`` and ``timeout``: the
    launch's start (a shared folder's files of an earlier launch are ignored) and
    how long to wait for the others.
    """

    def __init__(self, spec: Doc, me: str, where: Mapping[str, str], **how: Any) -> None:
        self.me = me
        self.where = where
        self.port: int = how["port"]
        self.shared: str | None = how.get("shared")
        self.started: float = how["started"]
        self.timeout: float = how["timeout"]
        self.deadline = time.monotonic() + self.timeout
        self.board: Board | None = None
        self.units = {u["name"]: u for u in spec["units"]}
        self.serving: set[str] = set()
        self.reported: set[str] = set()
        units = [u["name"] for u in spec["units"]]
        if self.shared is None and len(units) > 1:
            self.board = Board(how["listen"], self.port, units)

    def publish(self, phase: str, doc: Doc) -> None:
        if self.board is not None:
            self.board.publish(phase, doc)
        if self.shared is not None:
            write_json(os.path.join(self.shared, f"{self.me}.{phase}.json"), doc)

    def _one(self, unit: str, phase: str) -> Doc | None:
        if self.shared is None:
            host = self.where.get(unit)
            return fetch_doc(host, self.port, unit, phase, self.me) if host else None
        try:
            with open(os.path.join(self.shared, f"{unit}.{phase}.json"), "rb") as f:
                doc = read_doc(f.read(MAX_DOC_BYTES + 1), unit, phase)
        except OSError:
            return None
        fresh = doc is not None and doc["started"] >= self.started - self.timeout
        return doc if fresh else None

    def _serving(self, unit: str, phase: str) -> Doc | None:
        """A serving unit's stand-in document, when its first API port answers /health."""
        host = self.where.get(unit)
        spec = self.units.get(unit)
        apis = [port for port, owner in (spec or {}).get("ports", []) if owner.endswith(" API")]
        if host is None or spec is None or not apis or not answers_health(host, apis[0]):
            return None
        self.serving.add(unit)
        return serving_doc(spec, phase, host)

    def gather(self, units: Sequence[str], phase: str) -> dict[str, Doc | None]:
        """Each unit's document of ``phase``, waiting for them until the deadline; a unit
        already serving (a pod recreated alone finds its peers running) is not waited for."""
        found: dict[str, Doc | None] = {u: None for u in units}
        delay = 0.05
        while True:
            for u in [u for u, d in found.items() if d is None]:
                found[u] = self._one(u, phase) or self._serving(u, phase)
                if found[u] is not None and u not in self.serving:
                    self.reported.add(u)
            if all(d is not None for d in found.values()) or time.monotonic() >= self.deadline:
                return found
            time.sleep(delay)
            delay = min(POLL_S, delay * 2)

    def finish(self, others: Sequence[str]) -> None:
        """Serve until the others that are checking now (they reported) have this unit's
        final result; not for one that never reported or is already serving."""
        if self.board is not None:
            self.board.wait_fetched([u for u in others if u in self.reported], LINGER_S)
            self.close()

    def close(self) -> None:
        if self.board is not None:
            self.board.close()
            self.board = None


# ---------------------------------------------------------------- the report


def _who(units: Iterable[str], labels: Mapping[str, str]) -> str:
    return ", ".join(labels.get(u, u) for u in units)


def _difference(
    what: str, level: str, by: Mapping[str, list[str]], labels: Mapping[str, str], **more: Any
) -> Doc:
    """One fact that differs: which value each unit has, and the odd ones out (those
    without the value most units have; every unit, on a tie). ``named``: (value, unit)
    -> how to name that unit under that value (default its label)."""
    named = more.get("named") or {}
    order = {u: i for i, u in enumerate(labels)}
    by = {v: sorted(us, key=lambda u: (order.get(u, len(order)), u)) for v, us in by.items()}
    ranked = sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    detail = "; ".join(
        f"{value} on {', '.join(named.get((value, u)) or labels.get(u, u) for u in units)}"
        for value, units in ranked
    )
    tie = len(ranked) > 1 and len(ranked[0][1]) == len(ranked[1][1])
    odd = [u for _, units in (ranked if tie else ranked[1:]) for u in units]
    return {"what": what, "level": level, "detail": clean(detail, 600),
            "column": more.get("column", ""), "odd": sorted({labels.get(u, u) for u in odd}),
            "units": sorted({labels.get(u, u) for us in by.values() for u in us})}  # fmt: skip


def differences_tls(docs: Mapping[str, Doc], labels: Mapping[str, str]) -> list[Doc]:
    """The TLS switch must be the same on every NPU of every node (the guide's step 6)."""
    by: dict[str, list[str]] = {}
    devices: dict[tuple[str, str], list[int]] = {}
    for unit, doc in docs.items():
        tls = doc.get("facts", {}).get("tls")
        for device, value in sorted((tls if isinstance(tls, dict) else {}).items()):
            key = clean(value, 8)
            if unit not in by.setdefault(key, []):
                by[key].append(unit)
            if str(device).isdigit():
                devices.setdefault((key, unit), []).append(int(device))
    if len(by) <= 1:
        return []
    named = {(v, u): f"{labels.get(u, u)} (NPU {probe.span(ds)})" for (v, u), ds in devices.items()}
    return [_difference("TLS switch", FAIL, by, labels, named=named, column="tls")]


def differences_conf(docs: Mapping[str, Doc], labels: Mapping[str, str]) -> list[Doc]:
    """Every hccn.conf setting that is not an address (or is a netmask) must be equal."""
    confs = {}
    for unit, doc in docs.items():
        conf = doc.get("facts", {}).get("hccn_conf")
        if isinstance(conf, dict) and conf:
            confs[unit] = conf
    if len(confs) < 2:
        return []
    out: list[Doc] = []
    for key in sorted({k for c in confs.values() for k in c})[:MAX_ITEMS]:
        values = {u: clean(c.get(key, "(absent)"), 80) for u, c in confs.items()}
        if not key.startswith("netmask") and any(
            probe.is_ip(v.split("/")[0]) for v in values.values()
        ):
            continue  # an address is the node's own: it differs by design
        if len(set(values.values())) > 1:
            by: dict[str, list[str]] = {}
            for u, v in values.items():
                by.setdefault(v, []).append(u)
            out.append(
                _difference(f"hccn.conf {clean(key, 64)}", FAIL, by, labels, column="hccn.conf")
            )
    return out


def differences_fact(
    docs: Mapping[str, Doc], labels: Mapping[str, str], fact: str, level: str
) -> list[Doc]:
    """A fact every unit reports once (its platform, its driver version) must be equal."""
    by: dict[str, list[str]] = {}
    for unit, doc in docs.items():
        value = doc.get("platform") if fact == "platform" else doc.get("facts", {}).get(fact)
        if value is not None:
            by.setdefault(clean(value, 80), []).append(unit)
    if len(by) <= 1:
        return []
    what = "driver version" if fact == "driver" else fact
    column = "tools" if fact == "driver" else "devices"
    return [_difference(what, level, by, labels, column=column)]


def differences_superpod(
    spec: Doc, docs: Mapping[str, Doc], labels: Mapping[str, str]
) -> list[Doc]:
    """Peers in different super pods exchange over RoCE, not HCCS: worth knowing (A3)."""
    pods: dict[str, set[str]] = {}
    for unit, doc in docs.items():
        found = doc.get("facts", {}).get("superpod")
        pods[unit] = {clean(v, 12) for v in found.values()} if isinstance(found, dict) else set()
    out: list[Doc] = []
    for unit in spec["units"]:
        for peer, why in unit["peers"]:
            mine, theirs = pods.get(unit["name"]), pods.get(peer)
            if mine and theirs and not mine & theirs and unit["name"] < peer:
                by = {f"super pod {sorted(mine)}": [unit["name"]],
                      f"super pod {sorted(theirs)}": [peer]}  # fmt: skip
                out.append(
                    _difference(f"super pod of peers ({why})", WARN, by, labels, column="superpod")
                )
    return out


def _causes(docs: Mapping[str, Doc]) -> dict[tuple[str, int], str]:
    """(unit, NPU) -> why pings to it fail there: its own link is not UP."""
    found: dict[tuple[str, int], str] = {}
    for unit, doc in docs.items():
        down = doc.get("facts", {}).get("down")
        for d in down if isinstance(down, list) else []:
            if isinstance(d, int):
                found[(unit, d)] = f"its link is not UP ({doc.get('label') or unit})"
    return found


def _explained(check_: Check, pings: Sequence[Doc], causes: Mapping[tuple[str, int], str]) -> str:
    """A failed peers check, with the cause on the peer when the peer saw it itself."""
    detail = str(check_["detail"])
    for p in pings:
        peer, device = p.get("peer"), p.get("device")
        if p.get("ok") or not isinstance(peer, str) or not isinstance(device, int):
            continue
        cause = causes.get((peer, device))
        mine = f"NPU {p.get('from')} cannot reach" in detail and str(p.get("address")) in detail
        if cause and mine:
            return f"{detail} -> {cause}"
    return detail


def _row(
    unit: Doc, doc: Doc | None, timeout: float, causes: Mapping[tuple[str, int], str]
) -> tuple[Doc, list[str], list[str]]:
    """A unit's row, its failures found on it, and its failures caused by a peer."""
    if doc is None:
        why = (f"did not report within {timeout:g} s (is its entry running, with the same "
               "PREFLIGHT setting as the others?)" if timeout > 0
               else "has no result here (its <unit>.json)")  # fmt: skip
        row = {"unit": unit["name"], "label": unit["label"], "address": "?",
               "checks": [probe.fail("report", why)], "facts": {}, "verdict": FAIL}  # fmt: skip
        return row, [f"{unit['label']}: {why}"], []
    bad = [c for c in doc["checks"] if c["level"] == FAIL]
    address = doc.get("address") or "?"
    pings = doc.get("pings", [])
    row = {"unit": unit["name"], "label": unit["label"], "address": address,
           "checks": doc["checks"], "facts": doc.get("facts", {}), "pings": pings,
           "verdict": FAIL if bad else OK}  # fmt: skip
    here = f"{unit['label']} ({address})"
    own = [f"{here}: {c['check']}: {c['detail']}" for c in bad if c["check"] != "peers"]
    theirs = [
        f"{here}: peers: {_explained(c, pings, causes)}" for c in bad if c["check"] == "peers"
    ]
    return row, own, theirs


def compare(spec: Doc, docs: Mapping[str, Doc | None], timeout: float) -> Doc:
    """One report across units: every check, every difference that must not be, a verdict."""
    labels = {u["name"]: u["label"] for u in spec["units"]}
    present = {u: d for u, d in docs.items() if d is not None}
    differences = [
        *differences_fact(present, labels, "platform", FAIL),
        *differences_tls(present, labels),
        *differences_conf(present, labels),
        *differences_fact(present, labels, "driver", WARN),
        *differences_superpod(spec, present, labels),
    ]
    rows: list[Doc] = []
    failures: list[str] = []
    later: list[str] = []
    causes = _causes(present)
    for unit in spec["units"]:
        row, own, theirs = _row(unit, docs.get(unit["name"]), timeout, causes)
        rows.append(row)
        failures += own
        later += theirs
    failures += [f"{', '.join(d['odd'])}: {d['what']} differs from the other nodes' ({d['detail']})"
                 for d in differences if d["level"] == FAIL]  # fmt: skip
    odd = {u for d in differences if d["level"] == FAIL for u in d["odd"]}
    for row in rows:
        if row["label"] in odd:
            row["verdict"] = FAIL
    failures += later  # a peer unreachable comes after what the nodes found on themselves
    return {
        "schema": REPORT_SCHEMA,
        "layout": spec["layout"],
        "platform": spec.get("platform"),
        "units": rows,
        "differences": differences,
        "failures": failures,
        "verdict": FAIL if failures else OK,
        "finished": time.time(),
    }


COLUMNS = (
    ("tools", ("tools",)),
    ("devices", ("devices",)),
    ("busy", ("busy", "health")),
    ("links", ("link", "net_health", "netdetect", "gateway", "lldp")),
    ("npu-ip", ("npu_ip",)),
    ("tls", ("tls",)),
    ("superpod", ("superpod",)),
    ("hccn.conf", ("hccn_conf",)),
    ("peers", ("peers",)),
    ("ports", ("ports", "reserved")),
    ("model", ("model",)),
)


def cell(checks: Sequence[Check], names: Sequence[str]) -> str:
    """A table cell: ``ok``, ``warn``, ``FAIL(n)`` or ``-`` (not checked here)."""
    levels = [c["level"] for c in checks if c["check"] in names]
    if FAIL in levels:
        return f"FAIL({levels.count(FAIL)})"
    if WARN in levels:
        return "warn"
    return "ok" if OK in levels else "-"


def report_text(report: Doc) -> str:
    """The report as the table every node prints (and ``report.md`` holds)."""
    rows = [["unit", "address", *(c for c, _ in COLUMNS), "verdict"]]
    differs = {(u, d.get("column")) for d in report["differences"] if d["level"] == FAIL
               for u in d.get("odd", [])}  # fmt: skip
    for r in report["units"]:
        cells = [
            "DIFFERS" if (r["label"], column) in differs else cell(r["checks"], names)
            for column, names in COLUMNS
        ]
        rows.append([r["label"], r["address"], *cells, "FAIL" if r["verdict"] == FAIL else "ok"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    verdict = "FAIL" if report["verdict"] == FAIL else "PASS"
    lines = [f"preflight of {report['layout']}: {verdict} ({len(report['units'])} units)"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]  # noqa: B905
    sections = (
        ("must match across nodes, and does not:", [d for d in report["differences"]
                                                    if d["level"] == FAIL]),
        ("differences to know about:", [d for d in report["differences"] if d["level"] != FAIL]),
    )  # fmt: skip
    for title, found in sections:
        if found:
            lines += [title, *(f"  {d['what']}: {d['detail']}" for d in found)]
    warned = [(r["label"], c) for r in report["units"] for c in r["checks"] if c["level"] == WARN]
    if warned:
        lines += [
            "warnings:",
            *(f"  {label}: {c['check']}: {c['detail']}" for label, c in warned[:40]),
        ]
    if report["failures"]:
        lines += ["failures:", *(f"  {f}" for f in report["failures"][:60])]
    return "\n".join(lines) + "\n"


def verdict_line(report: Doc) -> str:
    """The last line every node prints: passed, or the first failures with node and reason."""
    if report["verdict"] != FAIL:
        return f"preflight passed on {len(report['units'])} units of {report['layout']}"
    first = report["failures"][:3]
    more = len(report["failures"]) - len(first)
    return "preflight FAILED: " + "; ".join(first) + (f"; and {more} more" if more > 0 else "")


def slug(layout: str) -> str:
    """A layout's name as one folder name (``a3/x/2p2d`` -> ``a3__x__2p2d``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", layout.replace("/", "__"))[:200]


def save(out_dir: str | None, layout: str, doc: Doc, report: Doc | None) -> str | None:
    """This unit's result (and, from the first unit, the report) in LOG_DIR/preflight/LAYOUT/."""
    if not out_dir:
        return None
    folder = os.path.join(out_dir, "preflight", slug(layout))
    try:
        os.makedirs(folder, exist_ok=True)
        write_json(os.path.join(folder, f"{doc['unit']}.json"), doc)
        if report is not None:
            write_json(os.path.join(folder, "report.json"), report)
            write_text(os.path.join(folder, "report.md"), "```\n" + report_text(report) + "```\n")
    except OSError as exc:
        say(f"cannot write the preflight results under {folder} ({type(exc).__name__})")
        return None
    return folder


def say(line: str) -> None:
    sys.stdout.write(f"[servekit] {line}\n")
    sys.stdout.flush()
