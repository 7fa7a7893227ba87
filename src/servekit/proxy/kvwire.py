"""vLLM's KV-event wire format, read defensively.

An engine started with ``--kv-events-config`` publishes on a ZMQ PUB socket
three-frame messages ``(topic, seq, payload)``: ``seq`` is an 8-byte big-endian
counter from 0, ``payload`` a msgpack ``EventBatch``, an array
``[ts, events, data_parallel_rank]``. Each event is a msgpack map tagged by
``"type"`` (vLLM 0.11 and later: ``BlockStored``, ``BlockRemoved``,
``AllBlocksCleared``) or, from older engines, an array whose first element is
that tag. ``BlockStored`` carries the new blocks' hashes, the hash of the block
before them (``parent_block_hash``, None at the start of a prompt), the token
ids of all its blocks and the block size; ``BlockRemoved`` the hashes evicted.

The publisher is another process, so a frame is input, not trust: every field is
checked and anything else is a :class:`WireError`, never an exception that could
stop the subscriber. Sizes are bounded (:data:`MAX_PAYLOAD`); msgspec bounds
nesting depth itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_PAYLOAD = 32 * 1024 * 1024  # one batch; vLLM's are a scheduler step's blocks
MAX_BLOCK_SIZE = 1 << 20
END_SEQ = -1  # the replay socket's end marker

Hash = int | bytes


class WireError(ValueError):
    """A frame or payload that is not a well-formed KV event batch."""


@dataclass(frozen=True, slots=True)
class Stored:
    """Blocks that entered the engine's prefix cache, in prompt order."""

    hashes: tuple[Hash, ...]
    parent: Hash | None
    token_ids: tuple[int, ...]
    block_size: int
    extra: tuple[object, ...] | None = None  # lora / multimodal / salt keys: never plain prompts


@dataclass(frozen=True, slots=True)
class Removed:
    """Blocks the engine evicted."""

    hashes: tuple[Hash, ...]


@dataclass(frozen=True, slots=True)
class Cleared:
    """The engine dropped its whole prefix cache (reset, restart)."""


Event = Stored | Removed | Cleared


@dataclass(frozen=True, slots=True)
class Batch:
    """One published message: its sequence number and events."""

    seq: int
    ts: float
    events: tuple[Event, ...]
    dp_rank: int | None


_STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                  "medium", "lora_name", "extra_keys")  # fmt: skip
_REMOVED_FIELDS = ("block_hashes", "medium")


def parse_seq(frame: bytes) -> int:
    """An 8-byte big-endian sequence number (signed: the replay end marker is -1)."""
    if len(frame) != 8:
        raise WireError(f"sequence frame of {len(frame)} bytes, expected 8")
    return int.from_bytes(frame, "big", signed=True)


def parse_frames(frames: list[bytes]) -> Batch:
    """A ``(topic, seq, payload)`` message into a :class:`Batch`; WireError when malformed."""
    if len(frames) != 3:
        raise WireError(f"{len(frames)} frames, expected 3 (topic, seq, payload)")
    return parse_payload(parse_seq(frames[1]), frames[2])


def parse_payload(seq: int, payload: bytes) -> Batch:
    """The msgpack ``EventBatch`` of message ``seq``."""
    if len(payload) > MAX_PAYLOAD:
        raise WireError(f"payload of {len(payload)} bytes is over {MAX_PAYLOAD}")
    import msgspec  # here: the zipapp (aiohttp only) imports this module's types

    try:
        doc = msgspec.msgpack.decode(payload)
    except (msgspec.DecodeError, RecursionError, MemoryError) as exc:
        raise WireError(f"payload is not msgpack ({exc})") from None
    if not isinstance(doc, list) or not 2 <= len(doc) <= 3:
        raise WireError("payload is not an EventBatch array [ts, events, dp_rank]")
    ts, events = doc[0], doc[1]
    rank = doc[2] if len(doc) == 3 else None
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        raise WireError("EventBatch ts is not a number")
    if not isinstance(events, list):
        raise WireError("EventBatch events is not an array")
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool)):
        raise WireError("EventBatch data_parallel_rank is not an integer")
    return Batch(seq, float(ts), tuple(parse_event(e) for e in events), rank)


def _fields(raw: Any, names: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    """An event as (tag, fields), from the tagged-map form or the older array form."""
    if isinstance(raw, dict):
        tag = raw.get("type")
        if not isinstance(tag, str):
            raise WireError("event map without a string 'type'")
        return tag, raw
    if isinstance(raw, list) and raw and isinstance(raw[0], str):
        return raw[0], dict(zip(names, raw[1:], strict=False))
    raise WireError("event is neither a tagged map nor a tagged array")


def parse_event(raw: Any) -> Event:
    """One event; unknown tags are refused (a newer engine would need a newer proxy)."""
    if isinstance(raw, dict):
        tag = raw.get("type")
    elif isinstance(raw, list) and raw:
        tag = raw[0]
    else:  # a bare number, string or null where an event belongs (hypothesis: [0, [True]])
        raise WireError(f"event is {type(raw).__name__}, not a tagged map or array")
    if tag == "BlockStored":
        _, f = _fields(raw, _STORED_FIELDS)
        return _stored(f)
    if tag == "BlockRemoved":
        _, f = _fields(raw, _REMOVED_FIELDS)
        return Removed(_hashes(f.get("block_hashes")))
    if tag == "AllBlocksCleared":
        _fields(raw, ())
        return Cleared()
    raise WireError(f"unknown event {str(tag)[:40]!r}")


def _hash(value: Any) -> Hash:
    if isinstance(value, bool) or not isinstance(value, int | bytes):
        raise WireError("a block hash is neither an integer nor bytes")
    return value


def _hashes(value: Any) -> tuple[Hash, ...]:
    if not isinstance(value, list):
        raise WireError("block_hashes is not an array")
    return tuple(_hash(v) for v in value)


def _stored(f: dict[str, Any]) -> Stored:
    hashes = _hashes(f.get("block_hashes"))
    parent = f.get("parent_block_hash")
    tokens = f.get("token_ids")
    size = f.get("block_size")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_BLOCK_SIZE:
        raise WireError("block_size is not a positive integer")
    if not isinstance(tokens, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in tokens
    ):
        raise WireError("token_ids is not an array of integers")
    if len(tokens) != len(hashes) * size:
        raise WireError(f"{len(tokens)} token ids for {len(hashes)} blocks of {size}")
    extra = f.get("extra_keys")
    keys = f.get("lora_name"), f.get("lora_id")
    marks: tuple[object, ...] | None = None
    if any(k is not None for k in keys) or (isinstance(extra, list) and any(extra)):
        marks = (repr(keys), repr(extra)[:4096])  # any extra key sets the blocks apart
    return Stored(hashes, None if parent is None else _hash(parent), tuple(tokens), size, marks)
