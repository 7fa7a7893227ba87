"""The layerwise decode guard (servekit.guard) against its spec, httpx and the proxy.

Properties over generated bodies: nothing passes whose metaserver httpx would
reach anywhere but a trusted proxy's address and path (0 bypasses); with the
URL as the proxy writes it the rule is the spec exactly; every body servekit's
proxy sends a layerwise decoder passes (0 false refusals); and on a layerwise
decoder nothing else passes, not the pull shapes, not the prompt-keyed marker.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from servekit.guard import (
    METASERVER_ENV,
    DecodeGuardMiddleware,
    body_passes,
    guard_rejects,
    metaserver_key,
    metaservers_from_env,
    trusted_metaservers,
)
from servekit.proxy.protocols.layerwise import decode_payload, default_metaserver

from .guard_spec import CLIENT_FIELDS, KV_VALUES, PREFILL_ANSWERS, RELAXED, bodies, kv_of
from .layerwise_spec import (
    SAME_PLACE,
    TRICKS,
    TRUSTED,
    goes_to_a_trusted_proxy,
    layerwise_bodies,
    layerwise_params,
    layerwise_shape,
    metaserver_urls,
    oracle_params,
)

KEYS = trusted_metaservers(" ".join(TRUSTED))


@pytest.mark.slow
@settings(RELAXED, max_examples=1500)
@given(layerwise_bodies())
def test_nothing_passes_that_sends_the_blocks_anywhere_else(body: bytes) -> None:
    if body_passes(body, metaservers=KEYS):
        kv = kv_of(body)
        assert layerwise_shape(kv), body
        assert goes_to_a_trusted_proxy(kv["metaserver"]), body


@settings(RELAXED, max_examples=500)
@given(layerwise_params())
def test_with_the_proxys_spelling_the_rule_is_the_spec(kv: Any) -> None:
    if isinstance(kv, dict) and kv.get("metaserver") in TRUSTED + tuple(TRICKS):
        body = json.dumps({"prompt": "x", "kv_transfer_params": kv}).encode()
        assert body_passes(body, metaservers=KEYS) is oracle_params(kv)


def test_every_trick_is_refused_and_every_respelling_accepted() -> None:
    for url in TRICKS:
        kv = {"do_remote_decode": False, "do_remote_prefill": True, "metaserver": url}
        body = json.dumps({"prompt": "x", "kv_transfer_params": kv}).encode()
        assert not body_passes(body, metaservers=KEYS), url
    for url in SAME_PLACE:  # positive control: normalisation is not refusing everything
        assert metaserver_key(url) in KEYS, url


@settings(RELAXED, max_examples=300)
@given(st.sampled_from(TRUSTED), CLIENT_FIELDS, st.one_of(st.just(None), KV_VALUES))
def test_every_body_the_proxy_sends_a_layerwise_decoder_passes(
    url: str, client: dict[str, Any], own_kv: Any
) -> None:
    body = dict(client) if own_kv is None else {**client, "kv_transfer_params": own_kv}
    sent = json.dumps(decode_payload(body, url)).encode()
    assert body_passes(sent, metaservers=trusted_metaservers(url))
    assert not guard_rejects("POST", "/v1/chat/completions", sent, True, trusted_metaservers(url))


@pytest.mark.parametrize(
    ("host", "port"), [("10.0.0.1", 8080), ("proxy.internal", 80), ("fd00::7", 9000)]
)
def test_the_proxys_default_url_is_one_the_guard_accepts(host: str, port: int) -> None:
    url = default_metaserver(host, port)
    assert metaserver_key(url) is not None
    sent = json.dumps(decode_payload({"prompt": "x"}, url)).encode()
    assert body_passes(sent, metaservers=trusted_metaservers(url))


@settings(RELAXED, max_examples=500)
@given(bodies())
def test_on_a_layerwise_decoder_no_other_shape_passes(body: bytes) -> None:
    """The pull and bootstrap params and the marker make a layerwise decoder wait or prefill."""
    if body_passes(body, metaservers=KEYS):
        assert layerwise_shape(kv_of(body))


def test_every_pull_answer_and_the_marker_are_refused_on_a_layerwise_decoder() -> None:
    for kv in [*PREFILL_ANSWERS, {"servekit_prompt_keyed": True}]:
        body = json.dumps({"prompt": "x", "kv_transfer_params": kv}).encode()
        # positive control: a pull decoder takes them (the marker: a prompt-keyed one)
        assert body_passes(body, accept_prompt_keyed=True)
        assert not body_passes(body, metaservers=KEYS)


def test_without_trusted_metaservers_the_layerwise_shape_is_refused() -> None:
    kv = {"do_remote_decode": False, "do_remote_prefill": True, "metaserver": TRUSTED[0]}
    body = json.dumps({"prompt": "x", "kv_transfer_params": kv}).encode()
    assert body_passes(body, metaservers=KEYS)  # positive control
    assert not body_passes(body)  # a pull decoder: no block ids, refused as before
    assert not body_passes(body, metaservers=frozenset())  # configured, nothing valid


@given(metaserver_urls())
def test_the_url_parser_never_crashes_and_keys_only_plain_urls(url: Any) -> None:
    key = metaserver_key(url)
    if key is not None:
        assert isinstance(url, str) and url.isascii()
        assert not any(c in url for c in "@?#%\\ \t\n")


def test_the_env_variable_sets_the_trust_and_a_bad_entry_refuses(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(METASERVER_ENV, raising=False)
    assert metaservers_from_env() is None
    monkeypatch.setenv(METASERVER_ENV, f"{TRUSTED[0]}, {TRUSTED[1]}")
    assert metaservers_from_env() == KEYS
    monkeypatch.setenv(METASERVER_ENV, "http://user@10.0.0.1:8080/v1/metaserver")
    with caplog.at_level(logging.ERROR, logger="servekit.guard"):
        assert metaservers_from_env() == frozenset()
    assert METASERVER_ENV in caplog.text


def test_the_middleware_reads_the_variable_and_reports_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(METASERVER_ENV, TRUSTED[0])

    async def app(scope: Any, receive: Any, send: Any) -> None:  # never reached here
        raise AssertionError

    guard = DecodeGuardMiddleware(app, state="on")
    assert guard.metaservers == trusted_metaservers(TRUSTED[0])
    assert guard.report()["layerwise_metaservers"] == [TRUSTED[0]]


def test_the_bypass_oracle_catches_a_lax_rule() -> None:
    """Positive control: a rule comparing only the host would let tricks through."""
    from urllib.parse import urlsplit

    lax = [u for u in TRICKS if urlsplit(u).hostname in ("10.0.0.1", "fd00::7")]
    caught = [u for u in lax if not goes_to_a_trusted_proxy(u)]
    assert len(caught) >= 10, caught
