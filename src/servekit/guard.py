"""The decode guard: the rule and its ASGI middleware, in one standard-library file.

Incident (first seed): a plain request sent straight to a decode-role instance
made the decoder prefill by itself, hit a fixed replay limit, and killed the
whole engine (about 20 minutes of weight reloading). On a decode instance a
generation request passes only when it asks for a remote prefill:

- ``kv_transfer_params.do_remote_prefill`` is ``true`` and the params carry what
  the connector needs to pull the KV: NIXL and vllm-ascend's Mooncake send
  ``remote_block_ids`` (block ids, or one list of them per KV cache group),
  ``remote_engine_id``, ``remote_request_id``, ``remote_host`` and ``remote_port``;
  vLLM's own Mooncake connector sends ``remote_engine_id``,
  ``remote_bootstrap_addr`` and ``transfer_id`` instead; or
- ``kv_transfer_params`` is the prompt-keyed marker ``{"servekit_prompt_keyed":
  true}`` that servekit's proxy sets for connectors that find the KV by prompt
  (ExampleConnector), and only on decoders started with
  ``SERVEKIT_DECODE_GUARD=prompt-keyed``. Any client can send the marker, and a
  connector that reads ``kv_transfer_params`` (NIXL, Mooncake) finds no remote
  prefill in it and prefills locally (the seed incident), so the default mode,
  ``strict``, refuses it; the Plan sets ``prompt-keyed`` from the decoder's
  connector (servekit.kvprotocol), never a user; or
- on a layerwise decoder (``SERVEKIT_GUARD_METASERVER`` set: vllm-ascend's
  MooncakeLayerwiseConnector), and then only: exactly ``{do_remote_decode: false,
  do_remote_prefill: true, metaserver: URL}`` where URL is one of the deployment's
  own proxies named in that variable (:func:`asks_layerwise_prefill`). The decoder
  POSTs its block allocation to that URL, so a URL a client chose is never called.

Everything else on a generating route (no params, ``do_remote_prefill: false``,
a field missing or of the wrong type, a body that is not a JSON object) gets
400 with code :data:`GUARD_ERROR_CODE`. Generating routes are read from the
engine's own router (Starlette's ``scope["app"].routes``) when the middleware
first sees the app: every route that accepts POST (or a websocket) is guarded
unless it is one of :data:`NEVER_GENERATE`; without a router every POST path
but those is guarded. ``GET /health`` says which routes are guarded (a header,
and a JSON body where the engine's is empty).

Load it into vLLM on decode instances, from servekit or from a copy of this
file on ``PYTHONPATH`` (it imports only the standard library)::

    vllm serve ... --middleware servekit.guard.DecodeGuardMiddleware
    PYTHONPATH=DIR vllm serve ... --middleware servekit_decode_guard.DecodeGuardMiddleware

``SERVEKIT_DECODE_GUARD`` in the engine's environment: ``strict`` (the default,
and what ``on`` or any unknown value means: remote prefill only), ``prompt-keyed``
(remote prefill or the marker) or ``off``.
``SERVEKIT_GUARD_METASERVER``: the proxy's metaserver URL(s), separated by
spaces or commas, for layerwise decoders (set, it admits the layerwise shape and
nothing else; an entry that is not a plain ``http(s)://HOST[:PORT]/PATH`` is
dropped with a log line, so a bad value refuses rather than opens).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from pathlib import Path
from typing import Any

GUARD_ERROR_CODE = "decode_role_requires_kv_transfer_params"
PROMPT_KEYED_KEY = "servekit_prompt_keyed"
MIDDLEWARE_CLASS = "DecodeGuardMiddleware"
RENDERED_MODULE = "servekit_decode_guard"
ENV_SWITCH = "SERVEKIT_DECODE_GUARD"
METASERVER_ENV = "SERVEKIT_GUARD_METASERVER"
STATE_HEADER = b"x-servekit-decode-guard"
ROUTES_HEADER = b"x-servekit-guarded-routes"
HEALTH_PATH = "/health"

# Routes of vLLM's API server that never run the model (tokenizer, caches, admin,
# adapters, metrics). Any other route that takes a POST or a websocket is guarded.
NEVER_GENERATE = frozenset(
    {
        "/tokenize", "/detokenize", "/metrics", "/ping",
        "/v1/completions/render", "/v1/chat/completions/render", "/v1/messages/render",
        "/v1/responses/render", "/v1/completions/derender", "/v1/chat/completions/derender",
        "/v1/messages/count_tokens", "/v1/responses/{response_id}/cancel",
        "/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache",
        "/sleep", "/wake_up", "/release_kv_cache_memory", "/start_profile", "/stop_profile",
        "/v1/load_lora_adapter", "/v1/unload_lora_adapter",
        "/abort_requests", "/inference/v1/abort_requests", "/pause", "/resume",
        "/scale_elastic_ep", "/is_scaling_elastic_ep",
    }
)  # fmt: skip

STATES = ("strict", "prompt-keyed", "off")
OFF_WORDS = ("off", "0", "false", "no")
_PULL_FIELDS = ("remote_engine_id", "remote_request_id", "remote_host")
_BOOTSTRAP_FIELDS = ("remote_engine_id", "remote_bootstrap_addr", "transfer_id")
_MATCH_FULL = 2  # starlette.routing.Match.FULL
_LAYERWISE_KEYS = frozenset({"do_remote_decode", "do_remote_prefill", "metaserver"})
_URL_MAX = 2048
# A plain URL and nothing else: no userinfo, query, fragment, percent-encoding,
# backslash, whitespace or non-ASCII; path segments that start with neither a dot
# nor a slash (no "." / ".." / empty segments). What passes means one thing to
# every HTTP client, so comparing it is comparing where the decoder would connect.
_URL_RE = re.compile(
    r"(?P<scheme>[A-Za-z]+)://(?P<host>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])"
    r"(?::(?P<port>[0-9]{1,5}))?(?P<path>(?:/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)+)",
    re.ASCII,
)
_DEFAULT_PORTS = {"http": 80, "https": 443}
_MAX_BLOCK_ID = 2**63 - 1  # vLLM keeps block ids in int64 arrays; 2**63 already overflows
_CACHE_MAX = 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("servekit.guard")


# -- the rule ------------------------------------------------------------------


def _text(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _whole(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _block_ids(value: object) -> bool:
    """Block ids: a non-empty list of ids, or one list per KV cache group (some non-empty)."""
    if not isinstance(value, list) or not value:
        return False
    if all(_whole(b, 0, _MAX_BLOCK_ID) for b in value):
        return True
    groups = all(isinstance(g, list) and all(_whole(b, 0, _MAX_BLOCK_ID) for b in g) for g in value)
    return groups and any(value)


def asks_remote_prefill(params: object) -> bool:
    """Whether kv_transfer_params make a decoder pull its KV instead of prefilling."""
    if not isinstance(params, dict) or params.get("do_remote_prefill") is not True:
        return False
    if all(_text(params.get(f)) for f in _BOOTSTRAP_FIELDS):
        return True
    return (
        all(_text(params.get(f)) for f in _PULL_FIELDS)
        and _whole(params.get("remote_port"), 0, 65535)
        and _block_ids(params.get("remote_block_ids"))
    )


def is_prompt_keyed_mark(params: object) -> bool:
    """The marker servekit's proxy puts on decode requests in prompt-keyed mode."""
    return params == {PROMPT_KEYED_KEY: True} and params[PROMPT_KEYED_KEY] is True


MetaserverKey = tuple[str, str, int, str]


def metaserver_key(url: object) -> MetaserverKey | None:
    """(scheme, host, port, path) of a plain metaserver URL, normalised; None if not plain.

    Normalised: scheme and host lower-cased, the default port filled in, an IPv6
    literal compressed. Nothing else is rewritten, so two URLs with one key are
    one address and one path to any client.
    """
    if not isinstance(url, str) or len(url) > _URL_MAX:
        return None
    m = _URL_RE.fullmatch(url)
    if m is None:
        return None
    scheme, host = m["scheme"].lower(), m["host"].lower()
    if scheme not in _DEFAULT_PORTS:
        return None
    if host.startswith("["):
        try:
            host = "[" + str(ipaddress.IPv6Address(host[1:-1])) + "]"
        except ValueError:
            return None
    port = int(m["port"]) if m["port"] is not None else _DEFAULT_PORTS[scheme]
    if not 0 < port <= 65535:
        return None
    return scheme, host, port, m["path"]


def metaserver_url(host: str, port: int, path: str = "/v1/metaserver") -> str:
    """The metaserver URL of a proxy listening at ``host:port`` (IPv6 literals bracketed)."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}{path}"


def trusted_metaservers(raw: str) -> frozenset[MetaserverKey]:
    """The keys of the URLs in ``SERVEKIT_GUARD_METASERVER`` (entries that are not plain: dropped)."""
    keys = (metaserver_key(part) for part in re.split(r"[\s,]+", raw.strip()) if part)
    return frozenset(k for k in keys if k is not None)


def asks_layerwise_prefill(params: object, trusted: frozenset[MetaserverKey]) -> bool:
    """The layerwise decode request, exactly as the proxy sends it, to a trusted metaserver.

    The decoder POSTs its allocation to ``metaserver`` and waits for the KV to be
    pushed; ``do_remote_decode`` true would also run the connector's producer
    branch on the decoder, so the key set is exactly the proxy's three keys.
    """
    if not isinstance(params, dict) or params.keys() != _LAYERWISE_KEYS:
        return False
    if params["do_remote_prefill"] is not True or params["do_remote_decode"] is not False:
        return False
    key = metaserver_key(params["metaserver"])
    return key is not None and key in trusted


def kv_params_pass(
    params: object,
    accept_prompt_keyed: bool = False,
    metaservers: frozenset[MetaserverKey] | None = None,
) -> bool:
    """The rule on the value of ``kv_transfer_params``.

    ``metaservers`` not None: a layerwise decoder, where only the layerwise shape
    to one of those metaservers passes (its connector would prefill locally for
    the prompt-keyed marker, and would wait forever on pull-shaped params).
    """
    if metaservers is not None:
        return asks_layerwise_prefill(params, metaservers)
    if asks_remote_prefill(params):
        return True
    return accept_prompt_keyed and is_prompt_keyed_mark(params)


def body_passes(
    body: bytes,
    accept_prompt_keyed: bool = False,
    metaservers: frozenset[MetaserverKey] | None = None,
) -> bool:
    """The rule on a whole request body, parsed as the engine parses it (json.loads)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return False
    if not isinstance(doc, dict):
        return False
    return kv_params_pass(doc.get("kv_transfer_params"), accept_prompt_keyed, metaservers)


def _template_regex(template: str) -> re.Pattern[str]:
    parts = re.split(r"\{[^/{}]+\}", template)
    return re.compile("[^/]+".join(re.escape(p) for p in parts) + r"/*")


_NEVER_REGEXES = tuple(_template_regex(t) for t in sorted(NEVER_GENERATE))


def never_generates(path: str) -> bool:
    """Whether ``path`` (a request path or a route template) is on the allow-list."""
    if path in NEVER_GENERATE:
        return True
    return any(rx.fullmatch(path) for rx in _NEVER_REGEXES)


def is_guarded_path(method: str, path: str) -> bool:
    """The rule without a router: every POST is guarded but the allow-listed paths."""
    return method.upper() == "POST" and not never_generates(path)


def guard_rejects(
    method: str,
    path: str,
    body: bytes,
    accept_prompt_keyed: bool = False,
    metaservers: frozenset[MetaserverKey] | None = None,
) -> bool:
    """The whole rule without a router: True when a decode-role instance must answer 400."""
    return is_guarded_path(method, path) and not body_passes(body, accept_prompt_keyed, metaservers)


def guard_error_body(path: str) -> bytes:
    """The 400 body: OpenAI-style error with a machine-readable code."""
    message = (
        f"{path} on a decode-role instance requires kv_transfer_params asking for a remote "
        "prefill (do_remote_prefill: true with remote_block_ids, remote_engine_id, "
        "remote_request_id, remote_host, remote_port; on a layerwise decoder exactly "
        "do_remote_decode: false, do_remote_prefill: true and metaserver: this deployment's "
        "proxy); send requests through the PD proxy"
    )
    doc = {"error": {"message": message, "type": "invalid_request_error", "code": GUARD_ERROR_CODE}}
    return json.dumps(doc).encode()


# -- routes --------------------------------------------------------------------


def _accepts(route: Any) -> str | None:
    """How a route is reached where it could generate: "POST", "WS", "ANY" or None."""
    if "websocket" in type(route).__name__.lower():
        return "WS"
    methods = getattr(route, "methods", None)
    if methods is None:
        return "ANY"  # a mounted app or an ASGI endpoint: every method
    return "POST" if "POST" in methods else None


class RouteTable:
    """Which requests the guard judges, read once from the engine's router.

    With routes (Starlette / FastAPI), a request is guarded when the route that
    serves it (first full match, as Starlette's router picks it) is guarded;
    requests no route takes (404, 405, slash redirects) reach no endpoint.
    Without routes, the path rule applies (:func:`is_guarded_path`).
    """

    def __init__(self, routes: Iterable[Any] | None) -> None:
        self.from_router = routes is not None
        self.entries: list[tuple[Any, bool]] = []
        self.guarded: list[str] = []
        for route in routes or ():
            how, path = _accepts(route), getattr(route, "path", None)
            guarded = how is not None and not (isinstance(path, str) and never_generates(path))
            self.entries.append((route, guarded))
            if guarded:
                self.guarded.append(f"{how} {path}")
        self._seen: dict[tuple[str, str, str, str], bool] = {}

    @classmethod
    def of_app(cls, app: object) -> RouteTable:
        routes = getattr(app, "routes", None)
        return cls(list(routes) if isinstance(routes, list | tuple) else None)

    def judges(self, scope: Scope) -> bool:
        """Whether this request must pass the rule."""
        key = (scope["type"], scope.get("method", ""), scope.get("root_path", ""), scope["path"])
        known = self._seen.get(key)
        if known is None:
            known = self._lookup(scope)
            if len(self._seen) >= _CACHE_MAX:
                self._seen.clear()
            self._seen[key] = known
        return known

    def _lookup(self, scope: Scope) -> bool:
        if not self.from_router:
            if scope["type"] == "websocket":
                return not never_generates(scope["path"])
            return is_guarded_path(scope.get("method", ""), scope["path"])
        for route, guarded in self.entries:
            try:
                match, _ = route.matches(scope)
            except Exception:  # a route that cannot tell: fail closed
                return True
            if getattr(match, "value", match) == _MATCH_FULL:
                return guarded
        return False


# -- the middleware ---------------------------------------------------------------


def guard_state() -> str:
    """``strict``, ``prompt-keyed`` or ``off`` from ``SERVEKIT_DECODE_GUARD``.

    Unset, ``on`` and anything unknown are ``strict`` (fail closed); 0/false/no mean off.
    """
    raw = os.environ.get(ENV_SWITCH, "strict").strip().lower()
    if raw in OFF_WORDS:
        return "off"
    return "prompt-keyed" if raw == "prompt-keyed" else "strict"


def accepts_marker(state: str) -> bool:
    """Whether a guard in ``state`` lets the prompt-keyed marker through."""
    return state == "prompt-keyed"


def metaservers_from_env() -> frozenset[MetaserverKey] | None:
    """``SERVEKIT_GUARD_METASERVER``'s trusted keys; None when unset (not a layerwise decoder)."""
    raw = os.environ.get(METASERVER_ENV, "")
    if not raw.strip():
        return None
    keys = trusted_metaservers(raw)
    dropped = [p for p in re.split(r"[\s,]+", raw.strip()) if p and metaserver_key(p) is None]
    if dropped:
        log.error(
            "decode guard: %s entries %s are not plain http(s)://HOST[:PORT]/PATH URLs and are "
            "ignored; layerwise requests naming them are refused",
            METASERVER_ENV, dropped,
        )  # fmt: skip
    return keys


def _key_url(key: MetaserverKey) -> str:
    scheme, host, port, path = key
    return f"{scheme}://{host}:{port}{path}"


def _make_visible(logger: logging.Logger) -> None:
    """Make the guard's lines reach the engine log whatever logging setup the server did.

    Servers configure logging after importing middleware modules (a dictConfig can
    disable loggers created before it); the middleware is built after that.
    """
    logger.disabled = False
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    if not logger.hasHandlers():
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [%(name)s] %(message)s"))
        logger.addHandler(handler)


async def _buffer(receive: Receive) -> tuple[list[Message], bytes, bool]:
    """Read the request body; returns the messages, the body and whether it completed."""
    messages: list[Message] = []
    chunks: list[bytes] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, b"".join(chunks), False
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return messages, b"".join(chunks), True


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A receive that gives back the buffered messages, then the real ones."""
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


async def _refuse(path: str, send: Send) -> None:
    body = guard_error_body(path)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class DecodeGuardMiddleware:
    """Refuses generation requests that do not ask for a remote prefill, on a decode instance.

    vLLM adds a class given to ``--middleware`` with ``app.add_middleware(cls)``,
    so the class takes the wrapped app as its only argument.
    """

    def __init__(self, app: ASGIApp, state: str | None = None) -> None:
        self.app = app
        self.state = guard_state() if state is None else state
        self.table: RouteTable | None = None
        _make_visible(log)
        self.metaservers = metaservers_from_env()

    @property
    def enabled(self) -> bool:
        return self.state != "off"

    def learn(self, scope: Scope) -> RouteTable:
        """List the routes on the first scope that shows the app (lifespan or a request)."""
        if self.table is None:
            self.table = RouteTable.of_app(scope.get("app"))
            where = "router" if self.table.from_router else "path rule, no router seen"
            log.info(
                "decode guard %s; guarded routes (%s): %s",
                self.state, where, ", ".join(self.table.guarded) or "every POST",
            )  # fmt: skip
        return self.table

    def report(self) -> dict[str, Any]:
        """What GET /health says about the guard."""
        table = self.table
        routes = table.guarded if table is not None and table.from_router else ["POST *"]
        source = "router" if table is not None and table.from_router else "path rule"
        allowed = sorted(NEVER_GENERATE)
        doc = {"state": self.state, "routes_from": source, "guarded": routes, "allowed": allowed}
        if self.metaservers is not None:
            doc["layerwise_metaservers"] = sorted(_key_url(k) for k in self.metaservers)
        return doc

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket", "lifespan"):
            await self.app(scope, receive, send)
            return
        table = self.learn(scope)
        if kind == "lifespan":
            await self.app(scope, receive, send)
        elif kind == "http" and scope.get("method") == "GET" and scope["path"] == HEALTH_PATH:
            await self.app(scope, receive, self._health_send(send))
        elif not self.enabled or not table.judges(scope):
            await self.app(scope, receive, send)
        elif kind == "websocket":
            await self._refuse_websocket(scope, receive, send)
        else:
            await self._judge(scope, receive, send)

    async def _judge(self, scope: Scope, receive: Receive, send: Send) -> None:
        messages, body, complete = await _buffer(receive)
        if complete and not body_passes(body, accepts_marker(self.state), self.metaservers):
            client = scope.get("client") or ("?", 0)
            log.warning(
                "decode guard: refused %s %s from %s:%s: kv_transfer_params do not ask for a "
                "remote prefill; send generation requests through the PD proxy",
                scope["method"], scope["path"], client[0], client[1],
            )  # fmt: skip
            await _refuse(scope["path"], send)
            return
        await self.app(scope, _replay(messages, receive), send)

    @staticmethod
    async def _refuse_websocket(scope: Scope, receive: Receive, send: Send) -> None:
        log.warning("decode guard: refused websocket %s on a decode instance", scope["path"])
        message = await receive()
        if message["type"] == "websocket.connect":
            await send({"type": "websocket.close", "code": 1008, "reason": GUARD_ERROR_CODE})

    def _health_send(self, send: Send) -> Send:
        """Add the guard's headers to /health, and its report as the body when it is empty."""
        held: list[Message] = []

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                held.append(message)
                return
            if not held or message["type"] != "http.response.body":
                await send(message)
                return
            start = held.pop()
            headers = [*start.get("headers", []), *self._headers()]
            empty = not message.get("body") and not message.get("more_body", False)
            if start["status"] != 200 or not empty:
                await send({**start, "headers": headers})
                await send(message)
                return
            body = json.dumps({"decode_guard": self.report()}).encode()
            kept = [h for h in headers if h[0].lower() not in (b"content-length", b"content-type")]
            kept += [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
            await send({**start, "headers": kept})
            await send({"type": "http.response.body", "body": body, "more_body": False})

        return wrapped

    def _headers(self) -> list[tuple[bytes, bytes]]:
        routes = self.report()["guarded"]
        value = " ".join(r.split(" ", 1)[1] for r in routes).encode("latin-1", "replace")
        return [(STATE_HEADER, self.state.encode()), (ROUTES_HEADER, value)]


# -- for the renderer ------------------------------------------------------------


def source_path() -> Path:
    """This file: copy it next to rendered scripts as ``RENDERED_MODULE + ".py"``."""
    return Path(__file__).resolve()


def source_bytes() -> bytes:
    """This file's bytes (what the renderer writes)."""
    return source_path().read_bytes()


def middleware_target(module: str = RENDERED_MODULE) -> str:
    """The ``--middleware`` value for this file imported as ``module``."""
    return f"{module}.{MIDDLEWARE_CLASS}"
