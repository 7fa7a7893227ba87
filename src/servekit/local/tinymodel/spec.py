"""The shape of the tiny model: one frozen record, so every file agrees on it.

The numbers follow what vLLM's CPU attention accepts (head_dim 64; it rejects
16) and stay small enough to start in about a minute on two cores. The context
length is generous so long-context checks have room.
"""

from __future__ import annotations

from servekit.vocabulary import StrictModel

SPECIAL_TOKENS = (
    "<|pad|>",
    "<|bos|>",
    "<|eos|>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|end|>",
)


class TinySpec(StrictModel):
    """Architecture and identity of the tiny Llama."""

    seed: int = 20260627
    hidden_size: int = 256
    intermediate_size: int = 512
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    tokenizer_vocab: int = 2000
    vocab_size: int = 2048
    max_positions: int = 8192
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    def token_id(self, token: str) -> int:
        """Id of a special token (they come first in the vocabulary)."""
        return SPECIAL_TOKENS.index(token)


DEFAULT_SPEC = TinySpec()
