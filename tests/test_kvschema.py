"""The KV-event schema is written once and is vLLM's (issue 46, item 3).

``tests/fixtures/kv_events/vllm.json`` was written by
``scripts/kv_events_fixture.py`` from vLLM 0.32's own structs: their fields,
which have no default, their tag and form, the replay end marker, and batches
encoded by vLLM's classes with its publisher's encoder. The simulator must
write those bytes exactly, and the proxy must read them into the events they
describe; both build their structs from :mod:`servekit.kvschema`. The ``vllm``
test rewrites the fixture from the installed vLLM and requires no change.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings, strategies as st

from servekit import kvschema
from servekit.proxy import kvevents as proxy_kvevents
from servekit.proxy.kvdecoder import MAX_HASH_BYTES
from servekit.proxy.kvwire import (
    Cleared,
    Removed,
    Stored,
    TooBig,
    parse_frames,
    parse_payload,
    parse_seq,
)
from servekit.sim import kvevents as sim_kvevents

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "kv_events" / "vllm.json").read_text())
SAMPLES = FIXTURE["samples"]


def _value(doc: Any) -> Any:
    """A fixture value: ``{"hex": ...}`` is bytes."""
    if isinstance(doc, dict) and set(doc) == {"hex"}:
        return bytes.fromhex(doc["hex"])
    if isinstance(doc, list):
        return [_value(v) for v in doc]
    return doc


def _fields(event: dict[str, Any]) -> dict[str, Any]:
    return {k: _value(v) for k, v in event.items() if k != "type"}


def test_the_schema_is_vllms_struct_for_struct() -> None:
    tables = {"EventBatch": kvschema.BATCH, **kvschema.EVENTS}
    assert set(tables) == set(FIXTURE["structs"])
    written = kvschema.struct_types("write")
    for name, facts in FIXTURE["structs"].items():
        table = tables[name]
        assert [f.name for f in table] == facts["fields"], name
        assert [f.name for f in table if f.always] == facts["always"], name
        config = written[name].__struct_config__  # type: ignore[attr-defined]
        assert (config.tag_field, config.tag) == (facts["tag_field"], facts["tag"]), name
        assert (config.array_like, config.omit_defaults) == (
            facts["array_like"],
            facts["omit_defaults"],
        ), name
    assert kvschema.seq_frame(kvschema.END_SEQ).hex() == FIXTURE["end_seq"]
    assert kvschema.seq_frame(7).hex() == FIXTURE["seq_7"]
    assert kvschema.read_seq(bytes.fromhex(FIXTURE["end_seq"])) == kvschema.END_SEQ


@pytest.mark.parametrize("sample", SAMPLES, ids=[s["name"] for s in SAMPLES])
def test_the_simulator_writes_vllms_bytes(sample: dict[str, Any]) -> None:
    events = [getattr(sim_kvevents, e["type"])(**_fields(e)) for e in sample["events"]]
    batch = sim_kvevents.EventBatch(sample["ts"], events, sample["data_parallel_rank"])
    assert msgspec.msgpack.encode(batch).hex() == sample["payload"]


def _expected(event: dict[str, Any]) -> Stored | Removed | Cleared:
    f = _fields(event)
    if event["type"] == kvschema.REMOVED:
        return Removed(tuple(f["block_hashes"]))
    if event["type"] == kvschema.CLEARED:
        return Cleared()
    keys = (f["lora_name"], f["lora_id"])
    extra_keys = f.get("extra_keys")
    extra = None  # no extra keys, or one nil per block: nothing sets the blocks apart
    if extra_keys is not None and any(x is not None for x in extra_keys):
        extra = msgspec.msgpack.encode(extra_keys)
    marks = (repr(keys), extra) if any(k is not None for k in keys) or extra else None
    return Stored(tuple(f["block_hashes"]), f["parent_block_hash"], tuple(f["token_ids"]),
                  f["block_size"], marks)  # fmt: skip


@pytest.mark.parametrize("sample", SAMPLES, ids=[s["name"] for s in SAMPLES])
def test_the_proxy_reads_vllms_bytes(sample: dict[str, Any]) -> None:
    frames = [b"", bytes.fromhex(FIXTURE["seq_7"]), bytes.fromhex(sample["payload"])]
    batch = parse_frames(frames)
    assert (batch.seq, batch.ts, batch.dp_rank) == (7, sample["ts"], sample["data_parallel_rank"])
    assert batch.events == tuple(_expected(e) for e in sample["events"])


_hash = st.integers(0, 2**64 - 1) | st.binary(min_size=1, max_size=MAX_HASH_BYTES + 16)
_maybe = st.none() | st.text(max_size=8)


@st.composite
def _stored_events(draw: st.DrawFn) -> dict[str, Any]:
    blocks, size = draw(st.integers(0, 4)), draw(st.integers(1, 4))
    event: dict[str, Any] = {
        "type": "BlockStored",
        "block_hashes": draw(st.lists(_hash, min_size=blocks, max_size=blocks)),
        "parent_block_hash": draw(st.none() | _hash),
        "token_ids": draw(
            st.lists(st.integers(0, 2**31), min_size=blocks * size, max_size=blocks * size)
        ),
        "block_size": size,
        "lora_id": draw(st.none() | st.integers(0, 9)),
        "medium": draw(st.sampled_from([None, "GPU", "CPU"])),
        "lora_name": draw(_maybe),
    }
    extra = draw(st.none() | st.lists(st.none() | st.tuples(st.text(max_size=4)), max_size=3))
    if extra is not None:
        event["extra_keys"] = extra
    for name in ("group_idx", "kv_cache_spec_sliding_window"):
        if draw(st.booleans()):
            event[name] = draw(st.integers(0, 4096))
    for name in ("kv_cache_spec_kind", "locality", "ownership", "session_id"):
        if draw(st.booleans()):
            event[name] = draw(st.text(max_size=6))
    return event


_events = st.lists(
    _stored_events()
    | st.builds(
        lambda h, m: {"type": "BlockRemoved", "block_hashes": h, "medium": m},
        st.lists(_hash, max_size=4),
        _maybe,
    )
    | st.just({"type": "AllBlocksCleared"}),
    max_size=6,
)


@settings(max_examples=100, deadline=None)
@given(_events, st.floats(0, 2e9), st.none() | st.integers(0, 64))
def test_whatever_the_simulator_writes_the_proxy_reads_or_refuses_by_its_hash_cap(
    events: list[dict[str, Any]], ts: float, rank: int | None
) -> None:
    """Every event the schema allows, written by the simulator's structs: the proxy reads
    it back as written, or refuses the batch as TooBig when a hash passes 64 bytes (the
    one cap a batch this small can reach), never anything else."""
    made = [getattr(sim_kvevents, e["type"])(**_fields(e)) for e in events]
    payload = msgspec.msgpack.encode(sim_kvevents.EventBatch(ts, made, rank))
    hashes = [h for e in events for h in (*e.get("block_hashes", ()), e.get("parent_block_hash"))]
    too_long = any(isinstance(h, bytes) and len(h) > MAX_HASH_BYTES for h in hashes)
    try:
        batch = parse_payload(3, payload)
    except TooBig:
        assert too_long
        return
    assert not too_long
    assert (batch.seq, batch.ts, batch.dp_rank) == (3, ts, rank)
    assert batch.events == tuple(_expected(e) for e in events)


def test_both_sides_use_the_one_end_marker() -> None:
    """The replay's end marker: written by the simulator, recognised by the proxy."""
    assert parse_seq(kvschema.seq_frame(kvschema.END_SEQ)) == kvschema.END_SEQ
    for module in (sim_kvevents, proxy_kvevents):
        assert module.END_SEQ is kvschema.END_SEQ, module.__name__


@pytest.mark.vllm
@pytest.mark.slow
def test_the_fixture_is_the_installed_vllms() -> None:
    """Imports vLLM (several seconds): its structs and bytes are still the fixture's."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed")
    script = ROOT / "scripts" / "kv_events_fixture.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
