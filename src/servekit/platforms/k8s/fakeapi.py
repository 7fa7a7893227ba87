"""The fake cluster's API server: pods by labels, list and watch, as the proxy reads them.

What the proxy's discovery (``servekit.proxy.kube``) talks to when the fake cluster
runs an elastic rendering (``k8s.elastic=on``): ``GET /api/v1/namespaces/NS/pods``
with an equality ``labelSelector`` (and ``limit``/``continue`` pages), and
``watch=1&resourceVersion=RV`` streaming one JSON event per line (ADDED, MODIFIED,
DELETED; BOOKMARK when a watch's time ends), behind the service account's bearer
token. Every pod has its ``metadata.uid``, a new one each time a pod is made again under
its name, as a real API server gives. It runs on its own event loop in a thread, so the fake cluster's controllers
(plain threads) change pods as the kubelet and LWS do: :meth:`FakeApi.add` a pod
(not ready), :meth:`ready` once its readiness probe passes, :meth:`terminate` (the
deletion timestamp a scale-down, a rollout or ``kubectl delete pod`` sets first) and
:meth:`delete` once its containers stopped. Plain HTTP on loopback: the proxy is
pointed at it through ``SERVEKIT_KUBE_API`` in its pod's environment.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import uuid
from typing import Any

from aiohttp import web

from servekit.vocabulary import url_for

HISTORY = 4096
"""Events kept for watches that resume from a version (older: 410 Gone, list again)."""


class FakeApi:
    """Pods of one namespace, served on ``127.0.0.1`` from a thread of its own."""

    def __init__(self, namespace: str, token: str) -> None:
        self.namespace = namespace
        self.token = token
        self.pods: dict[str, dict[str, Any]] = {}
        self.version = 1
        self.history: list[tuple[int, str, dict[str, Any]]] = []
        self.oldest = 0
        self.url = ""
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._watchers: set[asyncio.Queue[tuple[int, str, dict[str, Any]] | None]] = set()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> str:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self.url

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/{ns}/pods", self._pods)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = url_for("127.0.0.1", self._runner.addresses[0][1])

    async def _stop(self) -> None:
        for queue in list(self._watchers):
            queue.put_nowait(None)
        if self._runner is not None:
            await self._runner.cleanup()

    # -- what the cluster does (from any thread) ---------------------------

    def add(self, name: str, labels: dict[str, str], ip: str, uid: str | None = None) -> None:
        """A pod made: its ``uid`` (the one its downward API gave it), else a fresh one."""
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace, "labels": dict(labels),
                         "uid": uid or str(uuid.uuid4())},
            "status": {"phase": "Running", "podIP": ip,
                       "conditions": [{"type": "Ready", "status": "False"}]},
        }  # fmt: skip
        self._change("ADDED", name, pod)

    def ready(self, name: str, ready: bool = True) -> None:
        with self._lock:
            pod = copy.deepcopy(self.pods.get(name))
        if pod is None:
            return
        pod["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
        self._change("MODIFIED", name, pod)

    def terminate(self, name: str) -> None:
        with self._lock:
            pod = copy.deepcopy(self.pods.get(name))
        if pod is None:
            return
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self._change("MODIFIED", name, pod)

    def delete(self, name: str) -> None:
        with self._lock:
            pod = self.pods.get(name)
        if pod is not None:
            self._change("DELETED", name, copy.deepcopy(pod))

    def is_ready(self, name: str) -> bool:
        with self._lock:
            pod = self.pods.get(name)
            return pod is not None and _ready(pod)

    def _change(self, kind: str, name: str, pod: dict[str, Any]) -> None:
        done = threading.Event()

        def apply() -> None:
            with self._lock:
                self.version += 1
                pod["metadata"]["resourceVersion"] = str(self.version)
                if kind == "DELETED":
                    self.pods.pop(name, None)
                else:
                    self.pods[name] = pod
                event = (self.version, kind, copy.deepcopy(pod))
                self.history.append(event)
                if len(self.history) > HISTORY:
                    self.oldest = self.history.pop(0)[0] + 1
            for queue in list(self._watchers):
                queue.put_nowait(event)
            done.set()

        self._loop.call_soon_threadsafe(apply)
        done.wait(timeout=30)

    # -- the API -----------------------------------------------------------

    async def _pods(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response(_status(401, "Unauthorized"), status=401)
        query = dict(request.query)
        wanted = _selector(query.get("labelSelector", ""))
        if request.match_info["ns"] != self.namespace:
            wanted = {"": "\x00none"}
        if query.get("watch") in ("1", "true"):
            return await self._watch(request, wanted, int(query.get("resourceVersion") or 0))
        with self._lock:
            names = sorted(n for n, p in self.pods.items() if _matches(p, wanted))
            start = int(query.get("continue") or 0)
            limit = int(query.get("limit") or len(names) or 1)
            items = [copy.deepcopy(self.pods[n]) for n in names[start : start + limit]]
            meta: dict[str, Any] = {"resourceVersion": str(self.version)}
        if start + limit < len(names):
            meta["continue"] = str(start + limit)
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
        with self._lock:
            for past in self.history:
                if past[0] > since:
                    queue.put_nowait(past)
        self._watchers.add(queue)
        timeout = float(request.query.get("timeoutSeconds", "60"))
        try:
            async with asyncio.timeout(timeout):
                while (event := await queue.get()) is not None:
                    _, kind, obj = event
                    if _matches(obj, wanted):
                        await _send(resp, kind, obj)
        except TimeoutError:
            bookmark = {"kind": "Pod", "metadata": {"resourceVersion": str(self.version)}}
            await _send(resp, "BOOKMARK", bookmark)
        except (ConnectionError, RuntimeError):
            pass  # the proxy went away mid-watch
        finally:
            self._watchers.discard(queue)
        return resp


async def _send(resp: web.StreamResponse, kind: str, obj: dict[str, Any]) -> None:
    await resp.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in pod["status"].get("conditions", []))  # fmt: skip


def _selector(text: str) -> dict[str, str]:
    out = {}
    for term in filter(None, text.split(",")):
        key, _, value = term.replace("==", "=").partition("=")
        out[key] = value
    return out


def _matches(pod: dict[str, Any], wanted: dict[str, str]) -> bool:
    labels = pod["metadata"].get("labels", {})
    return all(labels.get(k) == v for k, v in wanted.items())


def _status(code: int, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": "Expired" if code == 410 else "Unauthorized", "code": code}  # fmt: skip
