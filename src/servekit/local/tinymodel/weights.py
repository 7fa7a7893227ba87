"""Seeded Llama weights for the tiny model.

The scales are chosen so that logits have clear margins (greedy decoding does
not hinge on the last bit of a bf16 sum), which keeps a PD answer equal to a
single instance's even though the two paths run different kernels.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from servekit.local.tinymodel.spec import TinySpec

Tensors = dict[str, npt.NDArray[np.float32]]


def _normal(
    rng: np.random.Generator, shape: tuple[int, int], std: float
) -> npt.NDArray[np.float32]:
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)


def _layer(rng: np.random.Generator, spec: TinySpec, i: int) -> Tensors:
    h, inter = spec.hidden_size, spec.intermediate_size
    q_out, kv_out = spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
    p = f"model.layers.{i}."
    ones = np.ones((h,), dtype=np.float32)
    return {
        p + "self_attn.q_proj.weight": _normal(rng, (q_out, h), h**-0.5),
        p + "self_attn.k_proj.weight": _normal(rng, (kv_out, h), h**-0.5),
        p + "self_attn.v_proj.weight": _normal(rng, (kv_out, h), h**-0.5),
        p + "self_attn.o_proj.weight": _normal(rng, (h, q_out), 0.5 * q_out**-0.5),
        p + "mlp.gate_proj.weight": _normal(rng, (inter, h), h**-0.5),
        p + "mlp.up_proj.weight": _normal(rng, (inter, h), h**-0.5),
        p + "mlp.down_proj.weight": _normal(rng, (h, inter), 0.5 * inter**-0.5),
        p + "input_layernorm.weight": ones,
        p + "post_attention_layernorm.weight": ones.copy(),
    }


def build_weights(spec: TinySpec) -> Tensors:
    """Every tensor of the model, drawn in a fixed order from one seeded generator."""
    rng = np.random.Generator(np.random.PCG64(spec.seed))
    tensors: Tensors = {
        "model.embed_tokens.weight": _normal(rng, (spec.vocab_size, spec.hidden_size), 1.0),
    }
    for i in range(spec.num_layers):
        tensors.update(_layer(rng, spec, i))
    tensors["model.norm.weight"] = np.ones((spec.hidden_size,), dtype=np.float32)
    tensors["lm_head.weight"] = _normal(rng, (spec.vocab_size, spec.hidden_size), 0.25)
    return tensors
