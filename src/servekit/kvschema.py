"""vLLM's KV-event wire format, written once: the simulator publishes it, the proxy reads it.

vLLM (``vllm/distributed/kv_events.py``, 0.32) publishes on a ZMQ PUB socket
three-frame messages ``(topic, seq, payload)``: ``seq`` an 8-byte big-endian
counter from 0, ``payload`` a msgpack ``EventBatch`` (an array ``[ts, events,
data_parallel_rank]``) whose events are msgpack maps tagged by ``"type"``
(``BlockStored``, ``BlockRemoved``, ``AllBlocksCleared``; engines before 0.11
wrote each event as an array whose first item is that tag, the fields in the
same order). A ROUTER replay socket answers ``(b"", start_seq)`` with the
buffered messages from ``start_seq`` on, each ``(b"", topic, seq, payload)``,
then an end marker ``(b"", b"", END_SEQ, b"")``.

This module holds all of that as data: the events' fields in vLLM's order with
vLLM's types (:data:`EVENTS`, :data:`BATCH`), which of them vLLM writes in every
event and which the proxy cannot do without, the tag, and the sequence frame
with its end marker (:func:`seq_frame`, :func:`read_seq`). The simulator's
encoder and the proxy's decoder are both built from it by :func:`struct_types`;
``tests/fixtures/kv_events/`` holds vLLM's own structs and bytes, and
``tests/test_kvschema.py`` holds both sides to them.

Standard library only: the proxy's zipapp carries it (``proxy/bundle.py``
``SHARED``). :func:`struct_types` imports msgspec when called, which only the
simulator and the kv-events policy do (both need msgspec anyway).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

TAG_FIELD = "type"
SEQ_BYTES = 8
END_SEQ = -1  # the replay socket's end marker, as a sequence number
BlockHash = bytes | int  # vLLM's ExternalBlockHash: a digest, or an int when asked for ints


@dataclass(frozen=True)
class Field:
    """One field of a vLLM struct, in its declared order.

    ``always``: vLLM declares it without a default, so every event it writes has
    it (``None`` included); the others are written only when set (``omit_defaults``).
    ``needed``: the proxy cannot use an event without it; engines older than the
    schema may lack the others, which then read as ``None``.
    """

    name: str
    type: Any
    always: bool
    needed: bool = False


BATCH: tuple[Field, ...] = (
    Field("ts", float, always=True, needed=True),
    Field("events", list[Any], always=True, needed=True),
    Field("data_parallel_rank", int | None, always=False),
)
EVENTS: dict[str, tuple[Field, ...]] = {
    "BlockStored": (
        Field("block_hashes", list[BlockHash], always=True, needed=True),
        Field("parent_block_hash", BlockHash | None, always=True, needed=True),
        Field("token_ids", list[int], always=True, needed=True),
        Field("block_size", int, always=True, needed=True),
        Field("lora_id", int | None, always=True),
        Field("medium", str | None, always=True),
        Field("lora_name", str | None, always=True),
        Field("extra_keys", list[tuple[Any, ...] | None] | None, always=False),
        Field("group_idx", int | None, always=False),
        Field("kv_cache_spec_kind", str | None, always=False),
        Field("kv_cache_spec_sliding_window", int | None, always=False),
        Field("locality", str | None, always=False),
        Field("ownership", str | None, always=False),
        Field("session_id", str | None, always=False),
    ),
    "BlockRemoved": (
        Field("block_hashes", list[BlockHash], always=True, needed=True),
        Field("medium", str | None, always=True),
        Field("group_idx", int | None, always=False),
        Field("locality", str | None, always=False),
        Field("ownership", str | None, always=False),
    ),
    "AllBlocksCleared": (),
}
STORED, REMOVED, CLEARED = EVENTS
MEDIUM_GPU = "GPU"


def seq_frame(seq: int) -> bytes:
    """The sequence frame of message ``seq`` (signed: :data:`END_SEQ` is -1)."""
    return seq.to_bytes(SEQ_BYTES, "big", signed=True)


def read_seq(frame: bytes) -> int | None:
    """A sequence frame's number; None when it is not :data:`SEQ_BYTES` long."""
    if len(frame) != SEQ_BYTES:
        return None
    return int.from_bytes(frame, "big", signed=True)


Form = Literal["map", "array"]
Side = Literal["write", "read"]


def struct_types(
    side: Side,
    form: Form = "map",
    types: Mapping[str, tuple[Any, Any]] | None = None,
) -> dict[str, type]:
    """msgspec Struct types of the batch (``"EventBatch"``) and of each event, by name.

    ``side="write"``: vLLM's own requiredness (fields without a default are written
    always), so an encoder writes vLLM's bytes. ``side="read"``: only the needed
    fields are required. ``types`` replaces a field's type and default by name (the
    proxy's caps: lists bounded in length, ``extra_keys`` kept as raw msgpack).
    ``form="array"`` is the events' older array form.
    """
    import msgspec  # only where structs are built: the zipapp never does

    over = dict(types or {})

    def fields(table: tuple[Field, ...]) -> list[tuple[str, Any] | tuple[str, Any, Any]]:
        out: list[tuple[str, Any] | tuple[str, Any, Any]] = []
        for f in table:
            kind, default = over.get(f.name, (f.type, None))
            required = f.always if side == "write" else f.needed
            out.append((f.name, kind) if required else (f.name, kind, default))
        return out

    made: dict[str, type] = {
        "EventBatch": msgspec.defstruct(
            "EventBatch", fields(BATCH), array_like=True, omit_defaults=True, gc=False
        )
    }
    for name, table in EVENTS.items():
        made[name] = msgspec.defstruct(
            name, fields(table), tag_field=TAG_FIELD, tag=name, array_like=form == "array",
            omit_defaults=True, gc=False,
        )  # fmt: skip
    return made
