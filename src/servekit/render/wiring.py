"""Wiring: every address one process calls another at, as a reference, and its text.

A proxy's backends (each engine API it routes to, each prefill's bootstrap
server, each engine's KV-event publisher) and a layerwise decoder's call back to
its proxy are held in the Plan as :class:`Address` references (which process, on
which node, which port, what it serves), never as URLs. Text is made of them by
two functions only, for a given *address map* (:data:`HostOf`: where a process
is reached from the others):

- :func:`url_parts` (and :func:`url`, :func:`url_word`): the URL of an address,
  built by the one URL builder (:func:`servekit.vocabulary.url_for`, an IPv6
  literal bracketed). In a rendered script the host is the node's address
  variable (``NODE<k>_IP``, :func:`script_host`), on Kubernetes a pod's DNS name,
  in a local run loopback, in ``verify`` the addresses it was given.
- :func:`proxy_command`: the proxy's command line, every flag spelled by the
  proxy's own option table (:func:`servekit.proxy.option_words`), every backend
  a URL of its reference.

A platform that reaches processes its own way (a pod per engine) emits the
proxy's command again from the same references with its own map; nothing reads
an address, a port or a flag back out of a rendered word.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import Field

from servekit.defaults import SETTINGS_BY_KEY
from servekit.proxy import KV_POLICY, option_words
from servekit.render.command import Arg, NodeRef, Part, Ref, Word, joined, node_var
from servekit.vocabulary import ProcessRole, ProxyMode, StrictModel, url_for, url_host

Listener = Literal["api", "bootstrap", "kv-events"]
"""What a process serves at an address: its HTTP API, its KV connector's bootstrap
server (HTTP), or its KV-event publisher (ZMQ over TCP)."""
SCHEMES: dict[Listener, str] = {"api": "http", "bootstrap": "http", "kv-events": "tcp"}
METASERVER_PATH = "/v1/metaserver"
"""Where a layerwise decoder calls its proxy back (the guard trusts exactly that URL)."""
KV_EVENTS_SWITCH = SETTINGS_BY_KEY["kv_events"].var + "_ON"  # as the scripts write it


class Address(StrictModel):
    """One listener of one process of the Plan: who, where, which port, what it serves."""

    process: str = Field(description="the Plan process that listens")
    node: int = Field(ge=0, description="the node it runs on")
    port: int = Field(ge=1, le=65535, description="its (mapped) port")
    role: ProcessRole = Field(description="the process's role")
    listener: Listener = Field(default="api", description="what it serves there")


Host = str | Ref
"""Where a process is reached: a literal host, or a script variable filled in at launch."""
HostOf = Callable[[Address], Host]
"""An address map: the host other processes reach an address's process at."""


def script_host(address: Address) -> NodeRef:
    """The address map of a rendered script where no address is known here: the
    node's address variable, ``${NODE<k>_IP}`` as its value."""
    return NodeRef.of(address.node, "${" + node_var(address.node) + "}")


def url_parts(address: Address, host_of: HostOf, path: str = "") -> tuple[Part, ...]:
    """The URL of ``address`` under ``host_of``, as word parts (the host may be a reference)."""
    host = host_of(address)
    scheme = SCHEMES[address.listener]
    if isinstance(host, str):
        return (url_for(host, address.port, path, scheme=scheme),)
    bracket = url_host(host.value) != host.value  # an IPv6 literal here
    return (
        f"{scheme}://" + ("[" if bracket else ""),
        host,
        ("]" if bracket else "") + f":{address.port}{path}",
    )


def url_word(address: Address, host_of: HostOf, path: str = "") -> Arg:
    """The URL of ``address`` as one command word."""
    return joined(*url_parts(address, host_of, path))


def url(address: Address, host_of: HostOf, path: str = "") -> str:
    """The URL of ``address`` as text (references at their value here)."""
    return "".join(p if isinstance(p, str) else p.value for p in url_parts(address, host_of, path))


class Bootstrap(StrictModel):
    """A prefill's bootstrap server (bootstrap mode), by the engine id decoders name it by."""

    engine_id: str
    server: Address


class Publisher(StrictModel):
    """An engine API the proxy routes to and the KV-event publisher that tells its cache."""

    engine: Address
    events: Address


class FailureDomain(StrictModel):
    """A backend and what fails with it: its engine (its DP ranks) and its node."""

    backend: Address
    engine: str


class ProxyWiring(StrictModel):
    """The proxy process as data: what its command says, every backend a reference.

    :func:`proxy_command` emits the command for an address map; the Plan's
    ``command`` of the proxy is that emission for the Plan's own map.
    """

    mode: ProxyMode
    launcher: tuple[Arg, ...] = Field(description="the interpreter and the proxy's zipapp")
    listen: Arg = Field(description="the address it listens on (--host)")
    port: int
    metaserver: Address | str | None = Field(
        default=None,
        description="layerwise: where decoders call back; its own listener, or a URL the "
        "layout pins",
    )
    admin: bool = False
    admin_key_env: str | None = None
    admin_key_file: str | None = None
    api_key_env: str | None = None
    api_key_file: str | None = None
    kv_lease: int | None = Field(default=None, description="seconds a prefill keeps its KV")
    prefill: tuple[Address, ...] = ()
    decode: tuple[Address, ...] = ()
    replica: tuple[Address, ...] = ()
    bootstrap: tuple[Bootstrap, ...] = Field(
        default=(),
        description="bootstrap mode: each prefill's bootstrap server, in --prefill order",
    )
    failure_domains: tuple[FailureDomain, ...] = Field(
        default=(), description="each backend's engine and node (they fail together)"
    )
    kv_events: tuple[Publisher, ...] = Field(
        default=(), description="kv-events policy: each routed engine's publisher"
    )

    def backends(self) -> tuple[Address, ...]:
        """Every engine API it routes to, in --prefill, --decode, --replica order."""
        return (*self.prefill, *self.decode, *self.replica)

    def backend_counts(self) -> dict[str, int]:
        """``<role>_instances`` -> count, as the proxy's /health reports them."""
        counts = {
            "prefill": len(self.prefill),
            "decode": len(self.decode),
            "replica": len(self.replica),
        }
        return {f"{role}_instances": n for role, n in counts.items() if n}


def kv_events_switch() -> Ref:
    """The condition of every KV-events word: the script's KV_EVENTS=1 (the default)."""
    return Ref(var=KV_EVENTS_SWITCH, value="1")


def proxy_words(
    proxy: ProxyWiring,
    host_of: HostOf,
    *,
    listen: Arg | None = None,
    metaserver: Address | None = None,
) -> list[tuple[str | None, Arg]]:
    """Each word of the proxy's command with the config field it belongs to (None: the
    launcher's words).

    ``listen`` and ``metaserver`` replace the Plan's where a platform decides them
    (Kubernetes: the pod's IP, the proxy's Service).
    """
    out: list[tuple[str | None, Arg]] = [(None, word) for word in proxy.launcher]

    def add(name: str, value: object, when: Ref | None = None) -> None:
        for word in option_words(name, value):
            assert isinstance(word, str | Word), word
            out.append((name, word if when is None else joined(word, when=when)))

    def urls(addresses: tuple[Address, ...]) -> tuple[Arg, ...]:
        return tuple(url_word(a, host_of) for a in addresses)

    add("host", proxy.listen if listen is None else listen)
    add("port", proxy.port)
    if proxy.mode != "replica":  # replica mode follows from --replica
        add("mode", proxy.mode)
    callback = proxy.metaserver if metaserver is None else metaserver
    if callback is not None:
        add("metaserver_url", callback if isinstance(callback, str) else
            url_word(callback, host_of, METASERVER_PATH))  # fmt: skip
    for name in ("admin", "admin_key_env", "admin_key_file", "api_key_env", "api_key_file"):
        add(name, getattr(proxy, name))
    add("kv_lease_s", proxy.kv_lease)
    add("prefill", urls(proxy.prefill))
    add("decode", urls(proxy.decode))
    add("replica", urls(proxy.replica))
    add("prefill_bootstrap", tuple(
        joined(f"{b.engine_id}=", url_word(b.server, host_of)) for b in proxy.bootstrap
    ))  # fmt: skip
    add("failure_domains", tuple(
        joined(url_word(d.backend, host_of), f"={d.engine}@{d.backend.node}")
        for d in proxy.failure_domains
    ))  # fmt: skip
    if proxy.kv_events:
        switch = kv_events_switch()
        prefills = set(proxy.prefill)  # a publisher's engine routed as a prefill or not
        stages = {"prefill_policy" if p.engine in prefills else "decode_policy"
                  for p in proxy.kv_events}  # fmt: skip
        for stage in ("prefill_policy", "decode_policy"):
            if stage in stages:
                add(stage, KV_POLICY, switch)
        publishers = tuple(
            joined(url_word(p.engine, host_of), "=", url_word(p.events, host_of))
            for p in proxy.kv_events
        )
        add("kv_events", publishers, switch)
    return out


def proxy_command(
    proxy: ProxyWiring,
    host_of: HostOf,
    *,
    listen: Arg | None = None,
    metaserver: Address | None = None,
) -> tuple[Arg, ...]:
    """The proxy's command for the address map ``host_of`` (see :func:`proxy_words`)."""
    words = proxy_words(proxy, host_of, listen=listen, metaserver=metaserver)
    return tuple(word for _, word in words)
