"""Hugging Face Gemma (v1) decoders (GemmaForCausalLM) ⇄ canonical view: Llama's layout with a 1 + w norm gain
and scaled embeddings.

Read off transformers' modeling_gemma.py:
  GemmaRMSNorm stores w and scales by (1 + w) (in float32, then casts back): declared as a "1+w" gain
  (glmc/symmetry/declarations.py), so canonicalisation folds 1 + w and leaves w = 0.
  model.embed_tokens is a GemmaTextScaledWordEmbedding: the looked-up rows times a constant √d (a float32 buffer
  `embed_scale`, non-persistent, cast to the weights' dtype). A constant commutes with every residual map, so the
  canonical `embed` is the stored table; the LM head reads the unscaled table when tied (tie_word_embeddings,
  the default): folding the final norm's gain into the head unties it, and the written config then says so.
  MLP: act(gate_proj x) ⊙ up_proj x with gelu_pytorch_tanh; multi-query (num_key_value_heads = 1) and grouped
  query attention as Llama.
Groups: Llama's (docs/families-qwen3-gemma-olmo.md). Narrow → wide is refused: √d changes with the width.
"""

from __future__ import annotations

from dataclasses import replace

from glmc.adapters.base import UnsupportedModel
from glmc.adapters.rope_decoders import RoPEDecoderAdapter, decoder_names
from glmc.symmetry.declarations import standard_norms

NAMES = decoder_names()

PRESETS = {
    # Llama's cpu preset shape with Gemma's defaults: a tied head and multi-query attention (1 key/value head)
    "cpu": dict(layers=4, width=128, heads=4, kv_heads=1, mlp=344, context=128, tokenizer="char", tied=True,
                batch_size=32, lr=2e-3, steps=1000, warmup=100, eval_every=200, eval_batches=8),
}

REFUSED = {
    "Gemma2ForCausalLM": "Gemma 2's sandwich norms put a gain on every sublayer's output, on the residual "
                         "coordinates themselves past a normalisation: the stream keeps only signed permutations, "
                         "and logit soft-capping; not supported",
    "Gemma3ForCausalLM": "Gemma 3 has Gemma 2's sandwich norms (the stream keeps only signed permutations) and "
                         "QK-norm; not supported",
    "Gemma3nForCausalLM": "Gemma 3n (per-layer embeddings, AltUp, sandwich norms) is not supported",
    "Gemma4ForCausalLM": "Gemma 4 has sandwich norms (the stream keeps only signed permutations); not supported",
    "VaultGemmaForCausalLM": "VaultGemma has sandwich-style post norms; not supported",
    "RecurrentGemmaForCausalLM": "RecurrentGemma's recurrent (RG-LRU) blocks are not supported",
}


class GemmaAdapter(RoPEDecoderAdapter):
    family = "gemma"
    names = NAMES
    label = "Gemma (v1)"
    training = replace(RoPEDecoderAdapter.training,
        presets=PRESETS,
        demo_shape=dict(layers=4, width=128, heads=4, kv_heads=1, mlp=344, tied=True),  # the cpu preset's shape
        demo_label="Gemma decoders (1 + w RMSNorm, √d embeddings, tied head, multi-query attention)",
        help=("A Gemma (v1) decoder (RMSNorm with 1 + w gains, √d-scaled embeddings, RoPE, gated GELU, multi- or "
              "grouped-query attention) on text. Preset: cpu (4 layers, width 128, 4 query heads sharing 1 "
              "key/value head, 344 units, tied, char tokenizer)."))
    classes = {"gemma": "GemmaForCausalLM"}
    refused = REFUSED


    def norms(self, model) -> dict:
        return standard_norms("rmsnorm", "1+w")

    def check_supported(self, model) -> None:
        super().check_supported(model)
        if getattr(model.config, "use_bidirectional_attention", None):
            raise UnsupportedModel("use_bidirectional_attention: glmc's language-model task is causal")

    def unsupported(self, model) -> dict[str, str]:
        return {**super().unsupported(model),
                "rectangular": "Gemma multiplies its embeddings by √d, which a wider stream changes"}
