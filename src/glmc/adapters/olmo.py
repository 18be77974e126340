"""Hugging Face OLMo (v1) decoders (OlmoForCausalLM) ⇄ canonical view: Llama's layout with parameter-free
LayerNorms and, optionally, clipped q/k/v projections.

Read off transformers' modeling_olmo.py:
  OlmoLayerNorm: F.layer_norm with no weight, no bias and eps = 1e-5 written in the module (no config field):
  declared as LayerNorms without gains (glmc/symmetry/declarations.py), so canonicalisation has nothing to fold,
  mean-centres the writers (the norm subtracts the mean) and the residual maps are the orthogonal maps that fix
  the all-ones direction, as in GPT-2.
  clip_qkv = c: q_proj, k_proj and v_proj outputs (biases included) are clamped elementwise to [−c, c] before the
  heads are split and RoPE applied. The residual maps act on the projections' inputs and survive; inside a head
  a map acts on the clamped coordinates, so it must commute with an elementwise symmetric clamp: signed
  permutations. On the QK side it must also commute with RoPE: per rotary plane I, J, −I or −J
  (plane-quarter-turn), one per key/value head; on the OV side any signed permutation of the head's coordinates
  (docs/families-qwen3-gemma-olmo.md). Without clip_qkv: Llama's scale-rotation and invertible maps.
Narrow → wide is refused: it must rescale the norms' eps by N/M, which OLMo hard-codes.
"""

from __future__ import annotations

from dataclasses import replace

from glmc.adapters.base import TrainOption, UnsupportedModel, text_spec
from glmc.adapters.rope_decoders import RoPEDecoderAdapter, decoder_names
from glmc.errors import BadOption
from glmc.symmetry.declarations import standard_norms
from glmc.symmetry.spec import GroupSpec

OLMO_EPS = 1e-5  # OlmoLayerNorm's, fixed in its forward


NAMES = decoder_names(drop=("blocks.{i}.ln1.w", "blocks.{i}.ln2.w", "ln_final.w"))

PRESETS = {
    # the Llama cpu preset's shape; OLMo-1B's clip_qkv is None, OLMo-7B-0424's 8.0: the preset clips at 8, so the
    # discrete inner groups are the ones exercised (after its 1000 steps a seed-0 model's pre-clip q/k reach 11, and
    # the clamp binds on up to 0.7 % of a layer's key entries)
    "cpu": dict(layers=4, width=128, heads=4, kv_heads=2, mlp=344, context=128, tokenizer="char", tied=False,
                clip_qkv=8.0, batch_size=32, lr=2e-3, steps=1000, warmup=100, eval_every=200, eval_batches=8),
}

REFUSED = {
    "Olmo2ForCausalLM": "OLMo 2 normalises each sublayer's output with a gain on the residual coordinates (the stream "
                        "keeps only signed permutations) and applies QK-norm over all heads at once; not supported",
    "Olmo3ForCausalLM": "OLMo 3 has OLMo 2's output norms and QK-norm; not supported",
    "OlmoeForCausalLM": "OLMoE's mixture-of-experts MLPs are not supported",
    "FlexOlmoForCausalLM": "FlexOlmo's mixture-of-experts MLPs are not supported",
}


def olmo_data_spec(p: dict, given: set, log) -> dict:
    """The text spec, after reading --clip-qkv (a positive number, or none)."""
    clip = p.get("clip_qkv")
    if isinstance(clip, str):
        try:
            p["clip_qkv"] = None if clip.lower() in ("none", "off") else float(clip)
        except ValueError:
            raise BadOption(f"--clip-qkv takes a positive number or none, got {clip!r}") from None
        if p["clip_qkv"] is not None and not p["clip_qkv"] > 0:
            raise BadOption(f"--clip-qkv must be positive (or none), got {clip}")
    return text_spec(p, given, log)


class OlmoAdapter(RoPEDecoderAdapter):
    family = "olmo"
    names = NAMES
    label = "OLMo (v1)"
    training = replace(RoPEDecoderAdapter.training,
        data_spec=olmo_data_spec,
        presets=PRESETS,
        model_options=RoPEDecoderAdapter.training.model_options + ("clip_qkv",),
        # the cpu preset's shape
        demo_shape=dict(layers=4, width=128, heads=4, kv_heads=2, mlp=344, tied=False, clip_qkv=8.0),
        demo_label="OLMo decoders (parameter-free LayerNorm, clip_qkv 8, RoPE, SwiGLU)",
        help=("An OLMo (v1) decoder (LayerNorm without parameters, RoPE, SwiGLU, optional clip_qkv) on text. "
              "Preset: cpu (4 layers, width 128, 4 query heads sharing 2 key/value heads, SwiGLU 344 units, "
              "untied, clip_qkv 8, char tokenizer)."),
        options=RoPEDecoderAdapter.training.options + (
            TrainOption("clip_qkv", "text", "Clamp q/k/v projections to [-c, c]: a positive number, or none "
                        "[preset: 8]."),))
    classes = {"olmo": "OlmoForCausalLM"}
    refused = REFUSED

    def norm(self, model) -> str:
        return "layernorm"

    def ln_eps(self, model) -> float:
        return OLMO_EPS

    def norms(self, model) -> dict:
        return standard_norms("layernorm", None)

    def groups(self, model) -> dict:
        g = super().groups(model)
        g["residual"] = GroupSpec("orthogonal-fixing-ones", model.config.hidden_size, subgroups=("permutation",))
        if model.config.clip_qkv is not None:
            qk, ov = g["qk"], g["ov"]
            g["qk"] = GroupSpec("plane-quarter-turn", qk.size, batch=qk.batch, per_layer=True, follows="kv_heads")
            g["ov"] = GroupSpec("head-signed-permutation", ov.size, batch=ov.batch, per_layer=True, follows="kv_heads")
        return g

    def unsupported(self, model) -> dict[str, str]:
        return {**super().unsupported(model),
                "rectangular": "widening must rescale the LayerNorm eps by N/M, and OLMo hard-codes it (1e-5)"}

    def check_supported(self, model) -> None:
        super().check_supported(model)
        clip = model.config.clip_qkv
        if clip is not None and not clip > 0:
            raise UnsupportedModel(f"clip_qkv={clip}: a clamp to an empty or one-point range is not a model glmc "
                                   "can align")
