"""The tiny model's byte-level BPE tokenizer, trained offline on shipped text.

Training runs on ``corpus.txt`` (package data) with the ``tokenizers`` library;
the result is deterministic for a given corpus and vocabulary size, so the same
command writes the same ``tokenizer.json`` everywhere.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from servekit.errors import UsageError
from servekit.local.tinymodel.spec import SPECIAL_TOKENS, TinySpec

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def corpus_text() -> str:
    """The training text shipped inside the package."""
    return (resources.files("servekit.local.tinymodel") / "corpus.txt").read_text("utf-8")


def train_tokenizer_json(spec: TinySpec) -> str:
    """Train the BPE and return its ``tokenizer.json`` text."""
    try:
        from tokenizers import (
            Tokenizer,
            decoders,
            models,
            pre_tokenizers,
            trainers,
        )
    except ImportError as exc:
        raise UsageError(
            "servekit model tiny needs the 'tokenizers' package; "
            "install the engine extra: pip install 'servekit[local]'"
        ) from exc

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.tokenizer_vocab,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_text().splitlines(), trainer)
    text: str = tok.to_str(pretty=True)
    return text + "\n"


def tokenizer_config(spec: TinySpec) -> dict[str, Any]:
    """``tokenizer_config.json``: the fast tokenizer class, special tokens, chat template."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|bos|>",
        "eos_token": "<|eos|>",
        "pad_token": "<|pad|>",
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": spec.max_positions,
        "chat_template": CHAT_TEMPLATE,
    }


def special_tokens_map() -> dict[str, str]:
    """``special_tokens_map.json`` for older loaders."""
    return {"bos_token": "<|bos|>", "eos_token": "<|eos|>", "pad_token": "<|pad|>"}


def dumps(doc: dict[str, Any]) -> str:
    """Stable JSON text: sorted keys, two-space indent, final newline."""
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
