"""local/1p1d-mooncake: two real vLLM CPU engines hand KV over through vLLM's MooncakeConnector.

The bootstrap protocol, end to end: ``servekit up`` starts the layout (the
Mooncake transfer engine over TCP on loopback, the CPU shim loaded by
``kv_connector_module_path``), the proxy sends the prefill
``{do_remote_decode, transfer_id}`` and builds the decode's params itself, and
the decoder pulls the prompt's KV from the prefill's bootstrap server. Each
answer through the proxy must equal local/single's byte for byte, and the
decoder's metrics must show that every prompt token came over the transfer
(``external_kv_transfer``) and none was computed (``local_compute``). The
decode guard refuses a plain request and the prompt-keyed marker: this
connector reads ``kv_transfer_params``, so the marker would be a bypass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from tests.helpers.http import guard_refuses
from tests.local.test_vllm_runs import Project, _wait_up

from servekit.local.demo import compare
from servekit.local.tinymodel import build_tiny_model

pytestmark = pytest.mark.vllm

LAYOUT = "local/1p1d-mooncake"
MODEL = "tiny-llama"


@dataclass(frozen=True)
class Target:
    """What :func:`servekit.local.demo.compare` reads of a run: its entry and model."""

    entry_url: str
    model: str = MODEL


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    root = tmp_path_factory.mktemp("mooncake")
    build_tiny_model(root / ".servekit/models/tiny")
    project = Project(root)
    _wait_up(project, {name: project.start(name) for name in (LAYOUT, "local/single")})
    yield project
    project.servekit("down", timeout=300)


def _decode_url(project: Project) -> str:
    return next(e.url for e in project.deployment(LAYOUT).endpoints if e.role == "decode")


def test_answers_through_the_proxy_equal_single_and_come_over_the_transfer(run: Project) -> None:
    pd = Target(run.deployment(LAYOUT).entry_url)
    single = Target(run.deployment("local/single").entry_url)
    outcomes, handoff = asyncio.run(compare(pd, single, _decode_url(run)))  # type: ignore[arg-type]
    for outcome in outcomes:
        assert outcome.error is None, outcome
        assert outcome.equal, (outcome.pd_text, outcome.single_text)
    assert handoff.sent > 4 * 200  # four prompts of about 260 words each
    assert handoff.external == handoff.sent, handoff
    assert handoff.local == 0, handoff


def test_the_decode_guard_refuses_a_plain_request_and_the_marker(run: Project) -> None:
    decode = _decode_url(run)
    plain = {"model": MODEL, "prompt": "What is 8*9?", "max_tokens": 4}
    guard_refuses(decode, plain)
    guard_refuses(decode, {**plain, "kv_transfer_params": {"servekit_prompt_keyed": True}})
