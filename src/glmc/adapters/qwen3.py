"""Hugging Face Qwen3 decoders (Qwen3ForCausalLM) ⇄ canonical view: Llama's layout plus QK-norm.

Native layout beyond Llama's (glmc/adapters/rope_decoders.py), read off transformers' modeling_qwen3.py:
  model.layers.{i}.self_attn.q_norm / k_norm: Qwen3RMSNorm over d_head with a gain [d_head], ONE per layer shared
  by every query (resp. key) head, applied to q_proj / k_proj's per-head output before RoPE; eps = rms_norm_eps,
  the same field as the stream norms'.
Groups (docs/families-qwen3-gemma-olmo.md): the residual, key/value and query head permutations, OV maps and MLP
units of Llama; inside a head only plane signs on the QK side (±I per rotary plane, one per key/value head, shared
by q and k), since a map before the normalisation must keep every query's and key's RMS, commute with the generic
gains and with RoPE. The q_norm / k_norm gains are moved by no group: shared by all heads, head permutations leave
them alone, and plane signs commute with them.
"""

from __future__ import annotations

from dataclasses import replace

from glmc.adapters.namemap import Entry
from glmc.adapters.rope_decoders import RoPEDecoderAdapter, decoder_names
from glmc.symmetry.declarations import NormSpec
from glmc.symmetry.spec import GroupSpec

_A = "model.layers.{i}.self_attn."
NAMES = decoder_names(after_o=(Entry("blocks.{i}.attn.q_norm.w", _A + "q_norm.weight"),
                               Entry("blocks.{i}.attn.k_norm.w", _A + "k_norm.weight")))

PRESETS = {
    # the Llama cpu preset's shape: 4 query heads sharing 2 key/value heads of 32, SwiGLU with ~8/3·d units, untied
    "cpu": dict(layers=4, width=128, heads=4, kv_heads=2, mlp=344, context=128, tokenizer="char", tied=False,
                batch_size=32, lr=2e-3, steps=1000, warmup=100, eval_every=200, eval_batches=8),
}

REFUSED = {
    "Qwen3MoeForCausalLM": "mixture-of-experts MLPs (a router picks experts per token) are not supported",
    "Qwen3NextForCausalLM": "hybrid linear-attention layers and gated attention outputs are not supported",
}


class Qwen3Adapter(RoPEDecoderAdapter):
    family = "qwen3"
    names = NAMES
    label = "Qwen3"
    training = replace(RoPEDecoderAdapter.training,
        presets=PRESETS,
        demo_shape=dict(layers=4, width=128, heads=4, kv_heads=2, mlp=344, tied=False),  # the cpu preset's shape
        demo_label="Qwen3 decoders (QK-norm, RoPE, SwiGLU, 4 query / 2 key-value heads)",
        help=("A Qwen3 decoder (RMSNorm, QK-norm on every query/key head, RoPE, SwiGLU, grouped-query attention) "
              "on text. Preset: cpu (4 layers, width 128, 4 query heads sharing 2 key/value heads, SwiGLU 344 "
              "units, untied, char tokenizer)."))
    classes = {"qwen3": "Qwen3ForCausalLM"}
    refused = REFUSED

    def norms(self, model) -> dict:
        # q_norm / k_norm: over each head's dimensions, left in place (the plane signs commute with them)
        return {**super().norms(model), "blocks.{i}.attn.q_norm": NormSpec("rmsnorm", "w", "head"),
                "blocks.{i}.attn.k_norm": NormSpec("rmsnorm", "w", "head")}

    def groups(self, model) -> dict:
        g = super().groups(model)
        g["qk"] = GroupSpec("plane-sign", g["qk"].size, batch=g["qk"].batch, per_layer=True, follows="kv_heads")
        return g

    def unsupported(self, model) -> dict[str, str]:
        return {**super().unsupported(model),
                "rectangular": "Qwen3's one rms_norm_eps serves the stream norms and the per-head QK norms: widening "
                               "rescales the stream norms' eps, which would change the QK norms"}
