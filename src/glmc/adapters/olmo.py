"""Hugging Face OLMo (v1) decoders (OlmoForCausalLM) ⇄ canonical view: Llama's layout with parameter-free
LayerNorms and, optionally, clipped q/k/v projections.

Read off transformers' modeling_olmo.py:
  OlmoLayerNorm: F.layer_norm with no weight, no bias and eps = 1e-5 written in the module (no config field).
  The canonical view carries these norms as gains of ones (ln1.w, ln2.w, ln_final.w), which no native tensor
  stores: canonicalisation then has nothing to fold, mean-centres the writers (the norm subtracts the mean) and
  the residual maps are the orthogonal maps that fix the all-ones direction, as in GPT-2. A view whose gains are
  not ones (nothing glmc makes) cannot be written back and is refused.
  clip_qkv = c: q_proj, k_proj and v_proj outputs (biases included) are clamped elementwise to [−c, c] before the
  heads are split and RoPE applied. The residual maps act on the projections' inputs and survive; inside a head
  a map acts on the clamped coordinates, so it must commute with an elementwise symmetric clamp: signed
  permutations. On the QK side it must also commute with RoPE: per rotary plane I, J, −I or −J
  (plane-quarter-turn), one per key/value head; on the OV side any signed permutation of the head's coordinates
  (docs/families-qwen3-gemma-olmo.md). Without clip_qkv: Llama's scale-rotation and invertible maps.
Narrow → wide is refused: it must rescale the norms' eps by N/M, which OLMo hard-codes.
"""

from __future__ import annotations

import torch

from glmc.adapters.base import UnsupportedModel
from glmc.adapters.namemap import Layout, NameMap
from glmc.adapters.rope_decoders import RoPEDecoderAdapter, decoder_names
from glmc.symmetry import head_kinds
from glmc.symmetry.spec import GroupSpec

head_kinds.register()

OLMO_EPS = 1e-5  # OlmoLayerNorm's, fixed in its forward
NORM_KEYS = ("blocks.{i}.ln1.w", "blocks.{i}.ln2.w", "ln_final.w")


class ParameterFreeNorms(NameMap):
    """A name map whose norms have no parameters: the view gets gains of ones for them, and writing a view back
    drops them (refusing gains that are not ones: no native tensor could hold them)."""

    def to_canonical(self, state, layout: Layout, copy=None, after=None):
        view = super().to_canonical(state, layout, copy, after)
        like = view["embed"]
        ones = {k.format(i=i): torch.ones(like.shape[-1], dtype=like.dtype, device=like.device)
                for k in NORM_KEYS for i in (range(layout.n_layer) if "{i}" in k else [None])}
        # block norms after their block's tensors, the final one at the end: the order the model reads them in
        return {**view, **ones}

    def to_native(self, view, layout: Layout, consume: bool = False):
        for k in (t.format(i=i) for t in NORM_KEYS for i in (range(layout.n_layer) if "{i}" in t else [None])):
            gain = view.pop(k) if consume else view.get(k)
            if gain is not None and not bool((gain.detach() == 1).all()):
                raise UnsupportedModel(f"OLMo's LayerNorms have no gains, so a view with {k} ≠ 1 cannot be written "
                                       "back; canonicalise it first")
        return super().to_native({k: v for k, v in view.items() if not _is_norm(k)} if not consume else view,
                                 layout, consume)


def _is_norm(key: str) -> bool:
    return key == "ln_final.w" or key.endswith((".ln1.w", ".ln2.w"))


NAMES = ParameterFreeNorms(decoder_names(drop=NORM_KEYS).entries)

PRESETS = {
    # the Llama cpu preset's shape; OLMo-1B's clip_qkv is None, OLMo-7B-0424's 8.0: the preset clips at 8 (a
    # bound a char model reaches), so the discrete inner groups are the ones exercised
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


class OlmoAdapter(RoPEDecoderAdapter):
    family = "olmo"
    names = NAMES
    label = "OLMo (v1)"
    dir_format = "config.json with model_type 'olmo' + *.safetensors (save_pretrained)"
    presets = PRESETS
    model_options = RoPEDecoderAdapter.model_options + ("clip_qkv",)
    classes = {"olmo": "OlmoForCausalLM"}
    refused = REFUSED

    def norm(self, model) -> str:
        return "layernorm"

    def ln_eps(self, model) -> float:
        return OLMO_EPS

    def groups(self, model) -> dict:
        g = super().groups(model)
        g["residual"] = GroupSpec("orthogonal-fixing-ones", model.config.hidden_size, subgroups=("permutation",))
        if model.config.clip_qkv is not None:
            qk, ov = g["qk"], g["ov"]
            g["qk"] = GroupSpec("plane-quarter-turn", qk.size, batch=qk.batch, per_layer=True, follows="kv_heads")
            g["ov"] = GroupSpec("signed-permutation", ov.size, batch=ov.batch, per_layer=True, follows="kv_heads")
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
