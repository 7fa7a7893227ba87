"""Write (or check) tests/fixtures/kv_events/vllm.json from the installed vLLM's own KV-event structs.

The fixture is what servekit's one KV-event schema (``servekit.kvschema``) is
held to without vLLM installed: each struct's fields in order, which have no
default, its tag and form, the replay end marker, and sample batches encoded by
vLLM's own classes with the encoder its publisher uses (the sample events are
described in JSON beside their bytes, hashes given as ints or ``{"hex": ...}``).

    .venv/bin/python scripts/kv_events_fixture.py           # rewrite the fixture
    .venv/bin/python scripts/kv_events_fixture.py --check   # exit 1 when vLLM differs

Imports vLLM (several seconds) with the torch companions that cannot load here
hidden, as servekit does for engines (``servekit.local.companions``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "kv_events" / "vllm.json"
STRUCTS = ("EventBatch", "BlockStored", "BlockRemoved", "AllBlocksCleared")
H1, H2, P = bytes(range(32)), bytes(range(32, 64)), bytes(range(64, 96))

# (name, ts, data_parallel_rank, events): each event a class name and its fields.
SAMPLES: list[tuple[str, float, int | None, list[tuple[str, dict[str, Any]]]]] = [
    ("plain prompt, int hashes", 1.5, 0, [
        ("BlockStored", {"block_hashes": [11, 12], "parent_block_hash": None,
                         "token_ids": list(range(8)), "block_size": 4, "lora_id": None,
                         "medium": "GPU", "lora_name": None}),
    ]),
    ("digest hashes, a parent, LoRA and extra keys, every optional field", 2.25, 3, [
        ("BlockStored", {"block_hashes": [H1, H2], "parent_block_hash": P,
                         "token_ids": [7] * 32, "block_size": 16, "lora_id": 3,
                         "medium": "GPU", "lora_name": "adapter",
                         "extra_keys": [("adapter", "mm-1", 0), None], "group_idx": 1,
                         "kv_cache_spec_kind": "full_attention",
                         "kv_cache_spec_sliding_window": 4096, "locality": "LOCAL",
                         "ownership": "tier-1", "session_id": "s-9"}),
    ]),
    ("removed and cleared, rank left to the publisher", 3.0, None, [
        ("BlockRemoved", {"block_hashes": [11, H1], "medium": "GPU"}),
        ("BlockRemoved", {"block_hashes": [12], "medium": None, "group_idx": 2,
                          "locality": "REMOTE", "ownership": "o"}),
        ("AllBlocksCleared", {}),
    ]),
]  # fmt: skip


def hide_broken_companions() -> None:
    """Mark torch companions that fail to import here absent (as servekit's engines do)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from servekit.local.companions import find_broken

    for broken in find_broken(sys.executable):
        sys.modules[broken.name] = None  # type: ignore[assignment]


def to_json(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value


def struct_facts(cls: Any) -> dict[str, Any]:
    fields = list(cls.__struct_fields__)
    optional = len(cls.__struct_defaults__)
    config = cls.__struct_config__
    return {
        "fields": fields,
        "always": fields[: len(fields) - optional],
        "tag_field": config.tag_field,
        "tag": config.tag,
        "array_like": config.array_like,
        "omit_defaults": config.omit_defaults,
    }


def build() -> dict[str, Any]:
    hide_broken_companions()
    import msgspec
    import vllm
    from vllm.distributed import kv_events as kv

    encoder = msgspec.msgpack.Encoder()  # what ZmqEventPublisher._publisher_thread uses
    samples = []
    for name, ts, rank, events in SAMPLES:
        made = [getattr(kv, cls)(**fields) for cls, fields in events]
        batch = kv.KVEventBatch(ts=ts, events=made, data_parallel_rank=rank)
        samples.append({
            "name": name, "ts": ts, "data_parallel_rank": rank,
            "events": [{"type": cls, **to_json(fields)} for cls, fields in events],
            "payload": encoder.encode(batch).hex(),
        })  # fmt: skip
    return {
        "vllm": vllm.__version__,
        "structs": {n: struct_facts(getattr(kv, n)) for n in STRUCTS},
        "end_seq": kv.ZmqEventPublisher.END_SEQ.hex(),
        "seq_7": (7).to_bytes(8, "big").hex(),  # the publisher's sequence frame
        "samples": samples,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    text = json.dumps(build(), indent=1, sort_keys=True) + "\n"
    if args.check:
        same = FIXTURE.read_text() == text
        print("the installed vLLM matches the fixture" if same else text)
        return 0 if same else 1
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(text)
    print(f"wrote {FIXTURE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
