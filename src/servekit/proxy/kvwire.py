"""vLLM's KV-event wire format, read defensively.

An engine started with ``--kv-events-config`` publishes on a ZMQ PUB socket
three-frame messages ``(topic, seq, payload)`` whose schema is written once in
:mod:`servekit.kvschema` (the simulator publishes from the same module).
``BlockStored`` carries the new blocks' hashes, the hash of the block before
them (``parent_block_hash``, None at the start of a prompt), the token ids of
all its blocks and the block size; ``BlockRemoved`` the hashes evicted.

The publisher is another process, so a frame is input, not trust, and it is
decoded on the proxy's event loop: every field is checked and anything else is
a :class:`WireError`, never an exception that could stop the subscriber, and
the work a frame can cost is bounded before it is done. A payload over
:data:`MAX_PAYLOAD` bytes is refused unread; the rest is decoded against the
events' own schema (:mod:`servekit.proxy.kvdecoder`), so a value of the wrong
shape stops the decode where it stands (a payload of 8 MiB of empty arrays took
5.5 s and 600 MB as untyped msgpack) and an array longer than its cap (events,
blocks, token ids per batch) is refused from its header, before its items are
read, and so is a block hash over 64 bytes (vLLM's are 32 at most; a 4 MB one
used to be indexed as it came). A batch that is too big is a :class:`TooBig`, a
:class:`WireError` the subscriber counts apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servekit.kvschema import REMOVED, SEQ_BYTES, STORED, read_seq

MAX_PAYLOAD = 4 * 1024 * 1024  # one batch (vLLM's: one scheduler step's blocks, < 1 MB)
MAX_BLOCK_SIZE = 1 << 20
MAX_EXTRA_MARK = 4096  # bytes of a BlockStored's extra keys kept to set its blocks apart

Hash = int | bytes


class WireError(ValueError):
    """A frame or payload that is not a well-formed KV event batch."""


class TooBig(WireError):
    """A batch over one of the caps (bytes, events, blocks, token ids): refused undone."""


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


def parse_seq(frame: bytes) -> int:
    """A sequence frame's number (:func:`servekit.kvschema.read_seq`); WireError when malformed."""
    seq = read_seq(frame)
    if seq is None:
        raise WireError(f"sequence frame of {len(frame)} bytes, expected {SEQ_BYTES}")
    return seq


def parse_frames(frames: list[bytes]) -> Batch:
    """A ``(topic, seq, payload)`` message into a :class:`Batch`; WireError when malformed."""
    if len(frames) != 3:
        raise WireError(f"{len(frames)} frames, expected 3 (topic, seq, payload)")
    return parse_payload(parse_seq(frames[1]), frames[2])


def _decode(decoder: Any, raw: Any, what: str) -> Any:
    import msgspec  # here: the zipapp (aiohttp only) imports this module's types

    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        if "length <=" in str(exc):  # an array over its cap, refused from its header
            raise TooBig(f"{what}: {exc}") from None
        raise WireError(f"{what} is malformed ({exc})") from None
    except (msgspec.DecodeError, RecursionError, MemoryError) as exc:
        raise WireError(f"{what} is not msgpack ({exc})") from None


def parse_payload(seq: int, payload: bytes) -> Batch:
    """The msgpack ``EventBatch`` of message ``seq``, its size and work bounded."""
    if len(payload) > MAX_PAYLOAD:
        raise TooBig(f"payload of {len(payload)} bytes is over {MAX_PAYLOAD}")
    from servekit.proxy import kvdecoder

    doc = _decode(kvdecoder.BATCH, payload, "payload")
    events: list[Event] = []
    blocks = tokens = 0
    for raw in doc.events:
        event = parse_event(raw)
        if not isinstance(event, Cleared):
            blocks += len(event.hashes)
        if isinstance(event, Stored):
            tokens += len(event.token_ids)
        if blocks > kvdecoder.MAX_BLOCKS or tokens > kvdecoder.MAX_TOKENS:
            msg = (
                f"more than {kvdecoder.MAX_BLOCKS} blocks or {kvdecoder.MAX_TOKENS} token ids "
                "in one batch"
            )
            raise TooBig(msg)
        events.append(event)
    return Batch(seq, doc.ts, tuple(events), doc.data_parallel_rank)


def parse_event(raw: Any) -> Event:
    """One event (its msgpack bytes); unknown tags are refused (a newer engine would need a
    newer proxy)."""
    from servekit.proxy import kvdecoder

    head = memoryview(raw)[:1].tobytes()
    event: Any
    if _is_map(head):
        event = _decode(kvdecoder.AS_MAP, raw, "event")
    elif _is_array(head):
        event = _decode(kvdecoder.AS_ARRAY, raw, "event")
    else:  # a bare number, string or null where an event belongs (hypothesis: [0, [True]])
        raise WireError("event is neither a tagged map nor a tagged array")
    tag = event.__struct_config__.tag  # the schema's event name
    if tag == REMOVED:
        return Removed(tuple(event.block_hashes))
    if tag == STORED:
        return _stored(event)
    return Cleared()


def _stored(f: Any) -> Stored:
    hashes, tokens, size = f.block_hashes, f.token_ids, f.block_size
    if not 0 < size <= MAX_BLOCK_SIZE:
        raise WireError("block_size is not a positive integer")
    if len(tokens) != len(hashes) * size:
        raise WireError(f"{len(tokens)} token ids for {len(hashes)} blocks of {size}")
    keys = f.lora_name, f.lora_id
    extra = _extra_mark(memoryview(f.extra_keys).tobytes())
    marks: tuple[object, ...] | None = None
    if any(k is not None for k in keys) or extra is not None:
        marks = (repr(keys), extra)  # any extra key sets the blocks apart
    return Stored(tuple(hashes), f.parent_block_hash, tuple(tokens), size, marks)


def _extra_mark(raw: bytes) -> bytes | None:
    """``extra_keys`` (msgpack) as a mark, or None when it names nothing: nil, or an
    array of nils (one per block). Read from its bytes, never decoded."""
    first = raw[:1]
    if not _is_array(first):
        return None  # nil, or not an array: no extra keys
    header = 1 if first[0] <= 0x9F else 3 if first == b"\xdc" else 5
    if not raw[header:].strip(b"\xc0"):
        return None
    return raw[:MAX_EXTRA_MARK]


def _is_map(head: bytes) -> bool:
    """``head`` (a value's first byte) starts a msgpack map."""
    return bool(head) and (0x80 <= head[0] <= 0x8F or head in (b"\xde", b"\xdf"))


def _is_array(head: bytes) -> bool:
    return bool(head) and (0x90 <= head[0] <= 0x9F or head in (b"\xdc", b"\xdd"))
