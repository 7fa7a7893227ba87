"""The tiny model: same command, same bytes; it loads in transformers and vLLM."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

import pytest
from tests.helpers.cli import servekit_cli

from servekit.local.tinymodel import DEFAULT_SPEC, build_tiny_model
from servekit.local.tinymodel.safetensors_bf16 import to_bf16_bits

# Training the tokenizer needs `tokenizers`, which comes with servekit[local].
needs_tokenizers = pytest.mark.skipif(
    importlib.util.find_spec("tokenizers") is None,
    reason="servekit model tiny needs servekit[local]",
)

EXPECTED_FILES = {
    ".servekit-output",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "servekit-tiny.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
}


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def _cli_build(out: Path, hashseed: str) -> None:
    env = {**os.environ, "PYTHONHASHSEED": hashseed}
    servekit_cli("model", "tiny", "--out", str(out), env=env, timeout=None, check=True)


@pytest.fixture
def companions_hidden() -> None:
    """transformers imports here as in the engines: torch companions that cannot load are hidden."""
    from servekit.local import companions

    companions.hide_in_process(companions.find_broken())


@needs_tokenizers
def test_same_command_same_bytes(tmp_path: Path) -> None:
    _cli_build(tmp_path / "a", "1")
    _cli_build(tmp_path / "b", "2")
    a, b = _digests(tmp_path / "a"), _digests(tmp_path / "b")
    assert set(a) == EXPECTED_FILES
    assert a == b


@needs_tokenizers
def test_rebuild_replaces_folder_whole(tmp_path: Path) -> None:
    out = tmp_path / "m"
    build_tiny_model(out)
    (out / "stray.txt").write_text("left over")
    build_tiny_model(out)
    assert {p.name for p in out.iterdir()} == EXPECTED_FILES


@needs_tokenizers
def test_safetensors_reads_back_with_the_library(tmp_path: Path) -> None:
    from safetensors import safe_open

    build_tiny_model(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), framework="numpy") as fh:
        names = set(fh.keys())
    assert "model.embed_tokens.weight" in names
    assert "lm_head.weight" in names
    assert len(names) == 3 + 9 * DEFAULT_SPEC.num_layers


def test_bf16_rounding_ties_to_even() -> None:
    import numpy as np

    values = np.array([1.0, -2.5, 1.00390625, 1.01171875], dtype=np.float32)
    bits = to_bf16_bits(values)
    assert [hex(int(b)) for b in bits] == ["0x3f80", "0xc020", "0x3f80", "0x3f82"]


@needs_tokenizers
def test_config_matches_cpu_attention_constraints(tmp_path: Path) -> None:
    build_tiny_model(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["head_dim"] == 64
    assert cfg["hidden_size"] == cfg["num_attention_heads"] * cfg["head_dim"]
    assert cfg["max_position_embeddings"] >= 4096


@pytest.mark.slow
@needs_tokenizers
def test_loads_and_generates_in_transformers(tmp_path: Path, companions_hidden: None) -> None:
    pytest.importorskip("transformers", reason="needs servekit[local]")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    build_tiny_model(tmp_path)
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path))
    assert len(tok) == DEFAULT_SPEC.tokenizer_vocab
    text = "The river runs north through the valley."
    ids = tok(text, return_tensors="pt")
    assert tok.decode(ids["input_ids"][0]) == text
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    again = model.generate(**ids, max_new_tokens=8, do_sample=False)
    assert out.shape[1] == ids["input_ids"].shape[1] + 8
    assert out.tolist() == again.tolist()
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat == "<|user|>\nhi<|end|>\n<|assistant|>\n"
