"""``config.json`` and ``generation_config.json`` of the tiny Llama."""

from __future__ import annotations

from typing import Any

from servekit.local.tinymodel.spec import TinySpec


def model_config(spec: TinySpec) -> dict[str, Any]:
    """A plain LlamaForCausalLM config both vLLM and transformers read."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_positions,
        "rms_norm_eps": spec.rms_norm_eps,
        "rope_theta": spec.rope_theta,
        "vocab_size": spec.vocab_size,
        "bos_token_id": spec.token_id("<|bos|>"),
        "eos_token_id": spec.token_id("<|eos|>"),
        "pad_token_id": spec.token_id("<|pad|>"),
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }


def generation_config(spec: TinySpec) -> dict[str, Any]:
    """Greedy by default, so that answers are reproducible without asking."""
    return {
        "bos_token_id": spec.token_id("<|bos|>"),
        "eos_token_id": [spec.token_id("<|eos|>"), spec.token_id("<|end|>")],
        "pad_token_id": spec.token_id("<|pad|>"),
        "do_sample": False,
        "max_new_tokens": 64,
    }
