"""Hugging Face Llama-family decoders (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM) ⇄ canonical view:
the RoPE decoder base (glmc/adapters/rope_decoders.py, which states the native layout) with Llama's own rule on
attention biases (only Qwen2's q/k/v biases are served) and its `glmc train llama` declarations. The three classes'
modules differ only in those biases and in Mistral's sliding window, which a symmetry does not see.
"""

from __future__ import annotations

from dataclasses import replace

from glmc.adapters.base import LM_OPTIONS, TrainOption, UnsupportedModel
from glmc.adapters.rope_decoders import RoPEDecoderAdapter

# model_type -> transformers class; the classes one adapter serves
CLASSES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}
# Llama-shaped classes whose symmetry groups differ: refused by name rather than transformed wrongly
REFUSED: dict[str, str] = {}  # Qwen3 (QK-norm) has its own adapter: glmc/adapters/qwen3.py


class LlamaAdapter(RoPEDecoderAdapter):
    family = "llama"
    classes = CLASSES
    refused = REFUSED
    label = "Llama-family (Llama, Mistral, Qwen2)"
    training = replace(
        RoPEDecoderAdapter.training,
        # the `glmc train llama` CPU preset's shape (4 query heads sharing 2 key/value heads, SwiGLU)
        demo_shape=dict(layers=4, width=128, heads=4, kv_heads=2, mlp=344, tied=False),
        demo_label="Llama decoders (RMSNorm, RoPE, SwiGLU, 4 query / 2 key-value heads)",
        help=("A Llama-family decoder (RMSNorm, RoPE, SwiGLU, grouped-query attention) on text. Preset: cpu (4 "
              "layers, width 128, 4 query heads sharing 2 key/value heads, SwiGLU 344 units, untied, char "
              "tokenizer)."),
        options=LM_OPTIONS + (
            TrainOption("kv_heads", "count", "Key/value heads (grouped-query attention; must divide --heads)."),
            TrainOption("head_dim", "int", "Head size, even (RoPE pairs) [width / heads]; a narrower model that keeps "
                        "the wide one's head size can be aligned to it (narrow → wide).", minimum=2),
            TrainOption("tied", "switch", "Tie the LM head to the embeddings [preset: untied].", off="untied")))

    def _check_attention_bias(self, model) -> None:
        if model.config.model_type != "qwen2" and getattr(model.config, "attention_bias", False):
            raise UnsupportedModel("attention_bias=True (biases on q/k/v and o_proj): not supported; only Qwen2's "
                                   "q/k/v biases are")

    def build(self, vocab_size, context, layers, width, heads, mlp, kv_heads=None, tied=False, activation="silu",
              model_type="llama", head_dim=None):
        return super().build(vocab_size, context, layers, width, heads, mlp, kv_heads=kv_heads, tied=tied,
                             activation=activation, head_dim=head_dim, model_type=model_type)
