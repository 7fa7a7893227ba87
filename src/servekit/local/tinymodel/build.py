"""Write the tiny model folder: same spec, same bytes, no network.

The folder appears whole or not at all (:func:`servekit.fsutil.staged_dir`).
``servekit-tiny.json`` records the spec and the servekit version that wrote it,
so a run can say which model it served.
"""

from __future__ import annotations

from pathlib import Path

from servekit.fsutil import staged_dir
from servekit.local.tinymodel import config, safetensors_bf16, tokenizer
from servekit.local.tinymodel.spec import DEFAULT_SPEC, TinySpec
from servekit.local.tinymodel.weights import build_weights

MANIFEST = "servekit-tiny.json"


def model_files(spec: TinySpec) -> dict[str, bytes]:
    """Every file of the model folder by name, as bytes."""
    return {
        "config.json": tokenizer.dumps(config.model_config(spec)).encode(),
        "generation_config.json": tokenizer.dumps(config.generation_config(spec)).encode(),
        "tokenizer.json": tokenizer.train_tokenizer_json(spec).encode(),
        "tokenizer_config.json": tokenizer.dumps(tokenizer.tokenizer_config(spec)).encode(),
        "special_tokens_map.json": tokenizer.dumps(tokenizer.special_tokens_map()).encode(),
        "model.safetensors": safetensors_bf16.encode(build_weights(spec)),
        MANIFEST: tokenizer.dumps({"name": "servekit-tiny", **spec.model_dump()}).encode(),
    }


def build_tiny_model(out: Path, spec: TinySpec = DEFAULT_SPEC) -> list[Path]:
    """Build the model into ``out`` (replacing it) and return the written paths."""
    files = model_files(spec)
    with staged_dir(out) as tmp:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
            (tmp / name).chmod(0o644)
    out.chmod(0o755)
    return [out / name for name in sorted(files)]
