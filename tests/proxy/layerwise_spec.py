"""The layerwise guard spec, written apart from servekit.guard, and hostile metaserver URLs.

Spec (issue 20, item 4): on a layerwise decoder (the guard told its proxies'
metaserver URLs) a generation request passes only when ``kv_transfer_params``
is exactly ``{do_remote_decode: false, do_remote_prefill: true, metaserver:
URL}`` and URL, read the way the decoder's HTTP client reads it (httpx, as
vllm-ascend's connector uses), connects to a trusted proxy's scheme, host and
port and asks for its path, with no userinfo. Everything else is refused,
including every shape a pull decoder accepts and the prompt-keyed marker.

A body that passes although httpx would send the decoder's blocks elsewhere is
a *bypass* (the decoder calls a URL a client chose); a body servekit's proxy
sends that is refused is a *false refusal*.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
from typing import Any

import httpx
from hypothesis import strategies as st

from .guard_spec import JSON_LEAF, PREFILL_ANSWERS

TRUSTED = ("http://10.0.0.1:8080/v1/metaserver", "http://[fd00::7]:9000/v1/metaserver")
KEYS = {"do_remote_decode", "do_remote_prefill", "metaserver"}


def where_httpx_goes(url: Any) -> tuple[str, str, int, str, bool] | None:
    """(scheme, host, port, path, has userinfo) as httpx reads the URL; None if it cannot."""
    if not isinstance(url, str):
        return None
    try:
        u = httpx.URL(url)
    except Exception:
        return None
    if u.scheme not in ("http", "https") or not u.host:
        return None
    host = u.host
    with contextlib.suppress(ValueError):
        host = str(ipaddress.ip_address(host))
    port = u.port or {"http": 80, "https": 443}[u.scheme]
    return u.scheme, host, port, u.raw_path.decode("ascii", "replace"), bool(u.userinfo)


TRUSTED_PLACES = {where_httpx_goes(u) for u in TRUSTED}


def goes_to_a_trusted_proxy(url: Any) -> bool:
    place = where_httpx_goes(url)
    return place is not None and not place[4] and place in TRUSTED_PLACES


def layerwise_shape(kv: Any) -> bool:
    return (
        type(kv) is dict
        and set(kv) == KEYS
        and kv["do_remote_prefill"] is True
        and kv["do_remote_decode"] is False
    )


def oracle_params(kv: Any) -> bool:
    """The spec, for a metaserver written as the proxy writes it (one of TRUSTED exactly)."""
    return layerwise_shape(kv) and kv["metaserver"] in TRUSTED


# -- hostile metaserver URLs -------------------------------------------------------

BASE = TRUSTED[0]
TRICKS = [
    "http://evil.example:8080/v1/metaserver", "http://10.0.0.1:8081/v1/metaserver",
    "http://10.0.0.1/v1/metaserver", "https://10.0.0.1:8080/v1/metaserver",
    "http://10.0.0.1:8080/v1/metaserver/", "http://10.0.0.1:8080/v1/Metaserver",
    "http://10.0.0.1:8080/v1/metaserverx", "http://10.0.0.1:8080/v2/metaserver",
    "http://10.0.0.1:8080/v1/../v1/metaserver", "http://10.0.0.1:8080/v1/./metaserver",
    "http://10.0.0.1:8080//v1/metaserver", "http://10.0.0.1:8080/v1/%6detaserver",
    "http://10.0.0.1:8080/v1/metaserver?x=1", "http://10.0.0.1:8080/v1/metaserver#f",
    "http://user@10.0.0.1:8080/v1/metaserver", "http://10.0.0.1:8080@evil.example/v1/metaserver",
    "http://evil.example\\@10.0.0.1:8080/v1/metaserver", "http://10.0.0.1:8080\\.evil/v1/metaserver",
    "http://10.0.0.1.evil.example:8080/v1/metaserver", "http://10.0.0.1:8080.evil/v1/metaserver",
    "http://１０.0.0.1:8080/v1/metaserver", "http://10.0.0.1:８０８０/v1/metaserver",
    "http://10.0.0.1:8080/v1/metaſerver", "http://ⅿetaserver:8080/v1/metaserver",
    "http://10.0.0.1 :8080/v1/metaserver", " http://10.0.0.1:8080/v1/metaserver",
    "http://10.0.0.1:8080/v1/metaserver ", "http://10.0.0.1:8080/v1/meta\tserver",
    "http://10.0.0.1:8080/v1/metaserver\n", "//10.0.0.1:8080/v1/metaserver",
    "10.0.0.1:8080/v1/metaserver", "http:/10.0.0.1:8080/v1/metaserver",
    "http://0x0a.0.0.1:8080/v1/metaserver", "http://10.1:8080/v1/metaserver",
    "http://167772161:8080/v1/metaserver", "http://[::ffff:10.0.0.1]:8080/v1/metaserver",
    "http://[fd00::7%25eth0]:9000/v1/metaserver", "http://[fd00::8]:9000/v1/metaserver",
    "http://10.0.0.1:0/v1/metaserver", "http://10.0.0.1:65536/v1/metaserver",
    "http://10.0.0.1:-1/v1/metaserver", "file:///v1/metaserver", "ws://10.0.0.1:8080/v1/metaserver",
    "http://10.0.0.1:8080/v1/metaserver;x", "", "http://", BASE * 30,
]  # fmt: skip
SAME_PLACE = [  # spelled differently, same address and path: passing them is no bypass
    "HTTP://10.0.0.1:8080/v1/metaserver", "http://10.0.0.1:08080/v1/metaserver",
    "http://[FD00::7]:9000/v1/metaserver", "http://[fd00:0::7]:9000/v1/metaserver",
    "http://[fd00:0:0:0:0:0:0:7]:9000/v1/metaserver",
]  # fmt: skip

URL_CHARS = st.sampled_from([*list("/:@.%?#\\ \t[]-_~0123456789abcdefAZ"), "１", "ſ", "ı", "\x00"])


@st.composite
def metaserver_urls(draw: st.DrawFn) -> Any:
    """Trusted URLs, their tricks, and random edits of them (insert, delete, replace)."""
    kind = draw(st.sampled_from(["trusted", "trick", "same", "edit", "edit", "leaf"]))
    if kind == "trusted":
        return draw(st.sampled_from(TRUSTED))
    if kind == "trick":
        return draw(st.sampled_from(TRICKS))
    if kind == "same":
        return draw(st.sampled_from(SAME_PLACE))
    if kind == "leaf":
        return draw(JSON_LEAF)
    url = draw(st.sampled_from(TRUSTED))
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(url)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        c = draw(URL_CHARS)
        if op == "insert":
            url = url[:i] + c + url[i:]
        elif op == "delete":
            url = url[:i] + url[i + 1 :]
        else:
            url = url[:i] + c + url[i + 1 :]
    return url


WRONG_FLAGS = st.sampled_from([True, False, None, 1, 0, "true", "false", 1.0, [], {}])


@st.composite
def layerwise_params(draw: st.DrawFn) -> Any:
    """The proxy's params with the URL, the flags or the key set changed, or other shapes."""
    kind = draw(st.sampled_from(["lw", "lw", "lw", "flags", "keys", "pull", "mark", "leaf"]))
    kv: dict[str, Any] = {
        "do_remote_decode": False, "do_remote_prefill": True, "metaserver": draw(metaserver_urls())
    }  # fmt: skip
    if kind == "flags":
        kv["do_remote_decode"] = draw(WRONG_FLAGS)
        kv["do_remote_prefill"] = draw(WRONG_FLAGS)
    elif kind == "keys":
        for key in draw(st.lists(st.sampled_from(sorted(KEYS)), max_size=2, unique=True)):
            del kv[key]
        extra = draw(st.dictionaries(
            st.sampled_from(["remote_block_ids", "remote_host", "x", "servekit_prompt_keyed"]),
            JSON_LEAF, max_size=2,
        ))  # fmt: skip
        kv.update(extra)
    elif kind == "pull":
        return {**draw(st.sampled_from(PREFILL_ANSWERS)), **draw(st.sampled_from([{}, kv]))}
    elif kind == "mark":
        return draw(st.sampled_from([{"servekit_prompt_keyed": True}, {}]))
    elif kind == "leaf":
        return draw(JSON_LEAF)
    return kv


@st.composite
def layerwise_bodies(draw: st.DrawFn) -> bytes:
    doc: dict[str, Any] = {"model": "m", "prompt": "hi", "max_tokens": 4}
    if draw(st.integers(0, 9)) > 0:
        doc["kv_transfer_params"] = draw(layerwise_params())
    text = json.dumps(doc, ensure_ascii=draw(st.booleans()))
    return text.encode()
