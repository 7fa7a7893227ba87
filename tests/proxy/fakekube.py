"""A small fake Kubernetes API server: pods by labels, list and watch, bearer tokens.

What the proxy's discovery (servekit.proxy.kube) talks to, served for real on
loopback: ``GET /api/v1/namespaces/NS/pods`` with an equality ``labelSelector``,
``limit``/``continue`` pages, and ``watch=1&resourceVersion=RV`` streaming one
JSON event per line (ADDED, MODIFIED, DELETED, BOOKMARK, and ERROR 410 for a
version older than the history kept). Tests change pods as the kubelet and the
controllers would (:meth:`FakeKube.add`, ``update``, ``terminate``: the deletion
timestamp a scale-down or eviction sets first; ``delete``: the pod gone),
forget history (``compact``: every watch must list again) and rotate the
service account's token (``rotate``: only the new one is accepted). Every
request is kept in ``seen`` (path, query, the Authorization header).
"""

from __future__ import annotations

import asyncio
import copy
import ssl
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from servekit.platforms.k8s.fakeapi import _matches, _ready, _selector, _send, _status

LWS = "leaderworkerset.sigs.k8s.io"


def lws_labels(lws: str, group: int, worker: int, **extra: str) -> dict[str, str]:
    """The labels LeaderWorkerSet puts on a pod (and ``extra``, the template's own)."""
    return {f"{LWS}/name": lws, f"{LWS}/group-index": str(group),
            f"{LWS}/worker-index": str(worker), **extra}  # fmt: skip


@dataclass
class FakeKube:
    namespace: str = "serving"
    token: str = "token-0"
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    version: int = 1
    history: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    oldest: int = 0  # a watch from a version below this gets 410 Gone
    seen: list[tuple[str, dict[str, str], str | None]] = field(default_factory=list)
    url: str = ""

    def __post_init__(self) -> None:
        self._watchers: set[asyncio.Queue[tuple[int, str, dict[str, Any]] | None]] = set()
        self._runner: web.AppRunner | None = None

    async def start(self, tls: ssl.SSLContext | None = None, host: str = "127.0.0.1") -> str:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/{ns}/pods", self._pods)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, 0, ssl_context=tls)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"{'https' if tls else 'http'}://{host}:{port}"
        return self.url

    async def stop(self) -> None:
        for queue in list(self._watchers):
            queue.put_nowait(None)
        if self._runner is not None:
            await self._runner.cleanup()

    # -- what the cluster does ---------------------------------------------

    def add(self, name: str, labels: dict[str, str], ip: str | None = None,
            ready: bool = False) -> None:  # fmt: skip
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace, "labels": dict(labels),
                         "uid": str(uuid.uuid4()),  # a pod made again: a new one
                         "managedFields": [{"manager": "kubelet", "x": "y" * 200}]},
            "spec": {"containers": [{"name": "engine", "command": ["bash", "pod.sh"]}]},
            "status": {"phase": "Running"},
        }  # fmt: skip
        self.pods[name] = pod
        self._set_status(pod, ip, ready)
        self._emit("ADDED", pod)

    def update(self, name: str, *, ready: bool | None = None, ip: str | None = None) -> None:
        pod = self.pods[name]
        status = pod["status"]
        self._set_status(
            pod, ip if ip is not None else status.get("podIP"),
            ready if ready is not None else _ready(pod),
        )  # fmt: skip
        self._emit("MODIFIED", pod)

    def terminate(self, name: str) -> None:
        """What a scale-down, rollout or eviction does first: the deletion timestamp."""
        self.pods[name]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self._emit("MODIFIED", self.pods[name])

    def delete(self, name: str) -> None:
        pod = self.pods.pop(name)
        self._emit("DELETED", pod)

    def compact(self) -> None:
        """Forget the history: open watches end with 410 Gone and must list again."""
        self.oldest = self.version + 1
        self.history.clear()
        for queue in list(self._watchers):
            queue.put_nowait((0, "ERROR", _status(410, "too old resource version")))

    def rotate(self, token: str) -> None:
        """The service account's token changes; the old one is refused from now on."""
        self.token = token

    # -- the API -----------------------------------------------------------

    def _set_status(self, pod: dict[str, Any], ip: str | None, ready: bool) -> None:
        status = pod["status"]
        if ip is None:
            status.pop("podIP", None)
        else:
            status["podIP"] = ip
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]

    def _emit(self, kind: str, pod: dict[str, Any]) -> None:
        self.version += 1
        pod["metadata"]["resourceVersion"] = str(self.version)
        event = (self.version, kind, copy.deepcopy(pod))
        self.history.append(event)
        for queue in list(self._watchers):
            queue.put_nowait(event)

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.token}"

    async def _pods(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.seen.append((request.path, query, request.headers.get("Authorization")))
        if not self._authorized(request):
            return web.json_response(_status(401, "Unauthorized"), status=401)
        if request.match_info["ns"] != self.namespace:
            return web.json_response({"kind": "PodList", "items": [],
                                      "metadata": {"resourceVersion": str(self.version)}})  # fmt: skip
        wanted = _selector(query.get("labelSelector", ""))
        if query.get("watch") in ("1", "true"):
            return await self._watch(request, wanted, int(query.get("resourceVersion", "0")))
        return self._list(wanted, query)

    def _list(self, wanted: dict[str, str], query: dict[str, str]) -> web.Response:
        names = sorted(n for n, p in self.pods.items() if _matches(p, wanted))
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or len(names) or 1)
        page = names[start : start + limit]
        meta: dict[str, Any] = {"resourceVersion": str(self.version)}
        if start + limit < len(names):
            meta["continue"] = str(start + limit)
        items = [self.pods[n] for n in page]
        return web.json_response({"kind": "PodList", "metadata": meta, "items": items})

    async def _watch(
        self, request: web.Request, wanted: dict[str, str], since: int
    ) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        if since < self.oldest:
            await _send(resp, "ERROR", _status(410, "too old resource version"))
            return resp
        queue: asyncio.Queue[tuple[int, str, dict[str, Any]] | None] = asyncio.Queue()
        for event in self.history:
            if event[0] > since:
                queue.put_nowait(event)
        self._watchers.add(queue)
        timeout = float(request.query.get("timeoutSeconds", "60"))
        try:
            async with asyncio.timeout(timeout):
                while (event := await queue.get()) is not None:
                    _, kind, obj = event
                    if kind == "ERROR":
                        await _send(resp, kind, obj)
                        break
                    if _matches(obj, wanted):
                        await _send(resp, kind, obj)
        except TimeoutError:
            bookmark = {"kind": "Pod", "metadata": {"resourceVersion": str(self.version)}}
            await _send(resp, "BOOKMARK", bookmark)
        finally:
            self._watchers.discard(queue)
        return resp
