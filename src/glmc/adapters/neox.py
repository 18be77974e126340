"""Hugging Face GPT-NeoX (GPTNeoXForCausalLM: Pythia, PolyPythias) ⇄ canonical view.

Native layout (transformers 5.23, modeling_gpt_neox.py; nn.Linear, weights stored [out, in], y = x·Wᵀ + b):
  gpt_neox.embed_in [V, d]; gpt_neox.layers.{i}.input_layernorm / post_attention_layernorm, gpt_neox.final_layer_norm:
  LayerNorms with biases
  attention.query_key_value [3·d, d] (+ bias [3·d] when attention_bias): rows ordered (head, {q, k, v}, d_head), as
  the forward's view(..., H, 3·d_head).chunk(3) reads them; attention.dense [d, d] (+ bias)
  mlp.dense_h_to_4h [n, d] (+ bias), mlp.dense_4h_to_h [d, n] (+ bias); act elementwise (gelu)
  lm_head [V, d] in the module, `embed_out` on disk (transformers renames it on load and writes embed_out back);
  tied to embed_in only when tie_word_embeddings (default False)
  use_parallel_residual (default True): x + attn(ln1 x) + mlp(ln2 x); else the sequential block
RoPE (`rotate_half`) rotates the first r = cos.shape[-1] coordinates of each head, planes (j, j + r/2), and passes
the rest through; r = 2·len(rotary_emb.inv_freq) = int(d_head · rope_parameters["partial_rotary_factor"]) rounded
up to even. The config fills rope_parameters from the legacy `rotary_pct` / `rotary_emb_base` of released Pythia
configs and defaults the factor to 0.25; a top-level `partial_rotary_factor` is NOT read by the model, so it is not
read here either. Older files also hold `attention.bias`, `attention.masked_bias` (causal-mask buffers) and
`attention.rotary_emb.inv_freq`: not weights, ignored on load and never written.
"""

from __future__ import annotations

import copy

import torch

from glmc.adapters.base import LM_OPTIONS, Adapter, Arch, Training, TrainOption, UnsupportedModel
from glmc.adapters.checkpoints import HFCheckpoint
from glmc.adapters.common import (
    ELEMENTWISE,
    RotaryLM,
    TokenLM,
    block_hooks,
    check_heads,
    rebuild,
)
from glmc.adapters.namemap import HEAD_COLUMNS, TRANSPOSE, Converter, Entry, Layout, NameMap, layer_norm
from glmc.symmetry.spec import GroupSpec, transformer_groups

CLASS = "GPTNeoXForCausalLM"

# fused q/k/v interleaved per head: [H·3·d_head, d] (rows (head, {q, k, v}, d_head)) ↔ (q, k, v) each [H, d_head, d]
QKV_PER_HEAD = Converter(
    "qkv-per-head",
    lambda t, dims: tuple(t.reshape(dims["n_head"], 3, -1, t.shape[-1]).unbind(1)),
    lambda ts, dims: torch.stack(ts, 1).reshape(-1, ts[0].shape[-1]))
QKV_PER_HEAD_BIAS = Converter(
    "qkv-per-head-bias",
    lambda t, dims: tuple(t.reshape(dims["n_head"], 3, -1).unbind(1)),
    lambda ts, dims: torch.stack(ts, 1).reshape(-1))

_L = "gpt_neox.layers.{i}."
_QKV = ("blocks.{i}.attn.q", "blocks.{i}.attn.k", "blocks.{i}.attn.v")
NAMES = NameMap([
    Entry("embed", "gpt_neox.embed_in.weight"),
    *layer_norm("blocks.{i}.ln1", _L + "input_layernorm"),
    Entry(tuple(p + ".w" for p in _QKV), _L + "attention.query_key_value.weight", QKV_PER_HEAD),
    Entry(tuple(p + ".b" for p in _QKV), _L + "attention.query_key_value.bias", QKV_PER_HEAD_BIAS, optional=True),
    Entry("blocks.{i}.attn.o.w", _L + "attention.dense.weight", HEAD_COLUMNS),
    Entry("blocks.{i}.attn.o.b", _L + "attention.dense.bias", optional=True),
    *layer_norm("blocks.{i}.ln2", _L + "post_attention_layernorm"),
    Entry("blocks.{i}.mlp.in.w", _L + "mlp.dense_h_to_4h.weight"),
    Entry("blocks.{i}.mlp.in.b", _L + "mlp.dense_h_to_4h.bias", optional=True),
    Entry("blocks.{i}.mlp.out.w", _L + "mlp.dense_4h_to_h.weight", TRANSPOSE),
    Entry("blocks.{i}.mlp.out.b", _L + "mlp.dense_4h_to_h.bias", optional=True),
    *layer_norm("ln_final", "gpt_neox.final_layer_norm"),
    Entry("head.w", "lm_head.weight"),  # present in the state dict even when tied
])

PRESETS = {
    # like GPT-2's cpu preset, with Pythia's structure: parallel attention + MLP, a quarter of each head rotary
    "cpu": dict(layers=4, width=128, heads=4, mlp=512, context=128, rotary=0.25, parallel=True, tokenizer="char",
                tied=False, dropout=0.0, batch_size=32, lr=2e-3, steps=1000, warmup=100, eval_every=200,
                eval_batches=8),
}


def rotary_dims(model) -> int:
    """The head coordinates RoPE rotates: what the forward's cos/sin cover (2 per inverse frequency)."""
    return 2 * int(model.gpt_neox.rotary_emb.inv_freq.numel())


def neox_groups(d_model: int, n_head: int, d_head: int, d_mlp: int, relu: bool, rotary: int) -> dict[str, GroupSpec]:
    """GPT-2's groups (LayerNorm residual fixing the ones, head permutations, GL(d_head) OV maps, MLP units), with
    the QK maps that commute with (partial) RoPE: a scale-rotation per rotary plane ⊕ GL on the pass-through dims."""
    groups = transformer_groups(d_model, n_head, d_head, d_mlp, relu)
    qk = (GroupSpec("scale-rotation", d_head, batch=n_head, per_layer=True, follows="heads") if rotary == d_head else
          GroupSpec("partial-rotary", d_head, batch=n_head, per_layer=True, follows="heads",
                    params={"rotary": rotary}))
    return {**groups, "qk": qk}


class NeoXAdapter(TokenLM, RotaryLM, Adapter):
    family = "neox"
    task = "lm"
    names = NAMES
    label = "GPT-NeoX (Pythia)"
    checkpoint = HFCheckpoint(classes={"gpt_neox": (CLASS,)},
                              format="config.json with model_type 'gpt_neox' + *.safetensors (save_pretrained, or "
                                     "Pythia's files)")
    training = Training(
        head_loss=True,
        presets=PRESETS,
        model_options=("layers", "width", "heads", "mlp", "rotary", "parallel", "tied", "activation", "dropout"),
        demo_shape=dict(layers=4, width=128, heads=4, mlp=512, rotary=0.25, parallel=True, tied=False),
        demo_label="GPT-NeoX decoders (parallel attention + MLP, a quarter of each head rotary)",
        help=("A GPT-NeoX decoder (Pythia's architecture: LayerNorm, parallel attention + MLP, partial rotary, "
              "untied head) on text. Preset: cpu (4 layers, width 128, 4 heads, MLP 512, rotary 0.25, char "
              "tokenizer)."),
        options=LM_OPTIONS + (
            TrainOption("rotary", "fraction", "Fraction of each head's dimensions RoPE rotates [preset: 0.25]."),
            TrainOption("parallel", "switch", "Parallel attention + MLP (Pythia) or sequential blocks [preset: "
                        "parallel].", off="sequential"),
            TrainOption("tied", "switch", "Tie the LM head to the embeddings [preset: untied].", off="untied"),
            TrainOption("activation", "choice", "", ("gelu", "gelu_new", "relu"), default="gelu")))

    @staticmethod
    def matches(model) -> bool:
        return type(model).__name__ == CLASS

    def check_supported(self, model) -> None:
        c = model.config
        if c.hidden_act not in ELEMENTWISE:
            raise UnsupportedModel(f"MLP activation {c.hidden_act!r} is not a known elementwise function, so unit "
                                   "permutations may not preserve the function")
        r, d_head = rotary_dims(model), c.hidden_size // c.num_attention_heads
        if r > d_head:
            raise UnsupportedModel(f"RoPE covers {r} coordinates of a {d_head}-dimensional head (an odd rotary "
                                   "size rounded up past the head): the forward would not run")

    def arch(self, model) -> Arch:
        c = model.config
        d_head = c.hidden_size // c.num_attention_heads
        relu = c.hidden_act == "relu"
        return Arch(family="neox", task="lm", n_layer=c.num_hidden_layers, d_model=c.hidden_size,
                    n_head=c.num_attention_heads, d_head=d_head, d_mlp=c.intermediate_size,
                    activation="relu" if relu else c.hidden_act, ln_eps=c.layer_norm_eps,
                    block="parallel" if c.use_parallel_residual else "sequential",
                    unsupported={"rectangular-head-size": "RoPE's frequencies depend on the head size (more heads "
                                                          "of the same size are exact)"},
                    groups=neox_groups(c.hidden_size, c.num_attention_heads, d_head, c.intermediate_size, relu,
                                       rotary_dims(model)))

    def layout(self, model) -> Layout:
        return Layout(model.config.num_hidden_layers, dims={"n_head": model.config.num_attention_heads})

    def build(self, vocab_size, context, layers, width, heads, mlp, rotary=0.25, parallel=True, tied=False,
              activation="gelu", dropout=0.0):
        from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

        check_heads(width, heads)
        cfg = GPTNeoXConfig(vocab_size=vocab_size, max_position_embeddings=context, hidden_size=width,
                            num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=mlp,
                            hidden_act=activation, use_parallel_residual=parallel, tie_word_embeddings=tied,
                            hidden_dropout=dropout, attention_dropout=dropout, bos_token_id=0, eos_token_id=0,
                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                             "partial_rotary_factor": float(rotary)})
        return GPTNeoXForCausalLM(cfg)

    def hook_modules(self, model) -> dict:
        return block_hooks(model.gpt_neox.layers, lambda b: b.attention.dense, lambda b: b.mlp.dense_4h_to_h)

    def from_canonical(self, view, model, ln_eps=None, tie=None, consume=False):
        h, dh, d = view["blocks.0.attn.q.w"].shape
        if h * dh != d:
            raise UnsupportedModel(f"GPT-NeoX needs num_attention_heads · head size = hidden_size, got {h}·{dh} != {d}")
        config = copy.deepcopy(model.config)
        config.hidden_size, config.num_attention_heads = d, h
        config.intermediate_size = view["blocks.0.mlp.in.w"].shape[0]
        if ln_eps is not None:
            config.layer_norm_eps = ln_eps
        same = torch.equal(view["embed"], view["head.w"])  # before native_state, which may consume the view
        return rebuild(model, config, self.native_state(view, model, consume), view, CLASS, same=same,
                       was_tied=self.is_tied(model), tie=tie, head=("lm_head.weight",))
