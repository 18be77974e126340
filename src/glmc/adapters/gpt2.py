"""Hugging Face GPT2LMHeadModel ⇄ canonical view.

Native layout (transformers' GPT-2 keeps Conv1D, weights stored [in, out], x·W + b):
  transformer.wte [V, d], transformer.wpe [P, d]
  h.{i}.attn.c_attn [d, 3d]: fused q | k | v columns, head h at columns h·d_head:(h+1)·d_head of each third
  h.{i}.attn.c_proj [d(=H·d_head), d]; h.{i}.mlp.c_fc [d, n]; h.{i}.mlp.c_proj [n, d]
  h.{i}.ln_1, ln_2, transformer.ln_f; lm_head [V, d] (tied to wte unless tie_word_embeddings=False)
"""

from __future__ import annotations

import copy

import torch

from glmc.adapters.base import LM_OPTIONS, Adapter, Arch, Training, TrainOption, UnsupportedModel
from glmc.adapters.checkpoints import HFCheckpoint
from glmc.adapters.common import (
    ELEMENTWISE,
    TokenLM,
    block_hooks,
    check_heads,
    rebuild,
    token_probe,
)
from glmc.adapters.namemap import HEAD_ROWS, QKV_BIAS, QKV_COLUMNS, TRANSPOSE, Entry, Layout, NameMap, layer_norm

_H = "transformer.h.{i}."
NAMES = NameMap([
    Entry("embed", "transformer.wte.weight"),
    Entry("pos_embed", "transformer.wpe.weight"),
    Entry(("blocks.{i}.attn.q.w", "blocks.{i}.attn.k.w", "blocks.{i}.attn.v.w"), _H + "attn.c_attn.weight",
          QKV_COLUMNS),
    Entry(("blocks.{i}.attn.q.b", "blocks.{i}.attn.k.b", "blocks.{i}.attn.v.b"), _H + "attn.c_attn.bias", QKV_BIAS),
    Entry("blocks.{i}.attn.o.w", _H + "attn.c_proj.weight", HEAD_ROWS),
    Entry("blocks.{i}.attn.o.b", _H + "attn.c_proj.bias"),
    Entry("blocks.{i}.mlp.in.w", _H + "mlp.c_fc.weight", TRANSPOSE),
    Entry("blocks.{i}.mlp.in.b", _H + "mlp.c_fc.bias"),
    Entry("blocks.{i}.mlp.out.w", _H + "mlp.c_proj.weight"),
    Entry("blocks.{i}.mlp.out.b", _H + "mlp.c_proj.bias"),
    *layer_norm("blocks.{i}.ln1", _H + "ln_1"),
    *layer_norm("blocks.{i}.ln2", _H + "ln_2"),
    *layer_norm("ln_final", "transformer.ln_f"),
    Entry("head.w", "lm_head.weight"),  # present in the state dict even when tied to wte
])

# Model shape and optimisation defaults (glmc train --preset). "cpu" fits the 5-minute / 2-core targets of
# issue #4; "paper-shakespeare" is arXiv 2506.22712's shape, meant for a GPU.
PRESETS = {
    "cpu": dict(layers=4, width=128, heads=4, mlp=512, context=128, dropout=0.0, tokenizer="char", tied=True,
                batch_size=32, lr=2e-3, steps=1000, warmup=100, eval_every=200, eval_batches=8),
    # arXiv 2506.22712, GPT-2 Tiny Shakespeare: GPT-2 BPE, untied head, dropout 0.1, AdamW 3e-4
    "paper-shakespeare": dict(layers=6, width=256, heads=4, mlp=1024, context=256, dropout=0.1, tokenizer="gpt2",
                              tied=False, batch_size=32, lr=3e-4, steps=5000, warmup=250, eval_every=250,
                              eval_batches=40, patience=8),
}


# GPT-2's default weight matching is the paper's alternation then per-head maps (decision D3); the ViT adapters keep
# glmc's
PAPER_WEIGHT_MATCHING = "paper"


class GPT2Adapter(TokenLM, Adapter):
    family = "gpt2"
    task = "lm"
    names = NAMES
    label = "GPT-2"
    checkpoint = HFCheckpoint(classes={"gpt2": ("GPT2LMHeadModel",)})
    training = Training(
        head_loss=True,
        presets=PRESETS, model_options=("layers", "width", "heads", "mlp", "dropout", "tied", "activation"),
        # small enough for about a minute per model on 2 CPU cores, large enough to show a clear vanilla barrier
        demo_shape=dict(layers=4, width=128, heads=4, mlp=512, dropout=0.0, tied=True, activation="gelu_new"),
        demo_label="GPT-2s",
        help=("HF GPT2LMHeadModel on text. Presets: cpu (4 layers, width 128, char, 1000 steps: ~4 min on 2 cores), "
              "paper-shakespeare (the paper's: 6 layers, width 256, 4 heads, MLP 1024, context 256, GPT-2 BPE, untied "
              "head, dropout 0.1, AdamW 3e-4)."),
        options=LM_OPTIONS + (
            TrainOption("tied", "switch", "Tie the LM head to the embeddings [preset: cpu tied, paper untied].",
                        off="untied"),
            TrainOption("activation", "choice", "", ("gelu_new", "gelu", "relu"), default="gelu_new")))

    @staticmethod
    def matches(model) -> bool:
        return type(model).__name__ == "GPT2LMHeadModel"

    def check_supported(self, model) -> None:
        c = model.config
        if getattr(c, "add_cross_attention", False):
            raise UnsupportedModel("GPT-2 with cross-attention (add_cross_attention=True): the encoder states it "
                                   "reads are outside the residual stream glmc transforms")
        if c.activation_function not in ELEMENTWISE:
            raise UnsupportedModel(f"activation {c.activation_function!r} is not a known elementwise function, so "
                                   "MLP unit permutations may not preserve the function")

    def arch(self, model) -> Arch:
        c = model.config
        return Arch(family="gpt2", task="lm", n_layer=c.n_layer, d_model=c.n_embd, n_head=c.n_head,
                    d_head=c.n_embd // c.n_head, d_mlp=c.n_inner or 4 * c.n_embd,
                    activation="relu" if c.activation_function == "relu" else c.activation_function,
                    ln_eps=c.layer_norm_epsilon, weight_matching=PAPER_WEIGHT_MATCHING)

    def layout(self, model) -> Layout:
        return Layout(model.config.n_layer, dims={"n_head": model.config.n_head})

    def build(self, vocab_size, context, layers, width, heads, mlp, dropout=0.0, tied=True, activation="gelu_new"):
        from transformers import GPT2Config, GPT2LMHeadModel

        check_heads(width, heads)
        cfg = GPT2Config(vocab_size=vocab_size, n_positions=context, n_embd=width, n_layer=layers, n_head=heads,
                         n_inner=mlp, activation_function=activation, resid_pdrop=dropout, embd_pdrop=dropout,
                         attn_pdrop=dropout, tie_word_embeddings=tied,
                         # GPT-2's default ids (50256) may not exist in a small vocabulary
                         bos_token_id=vocab_size - 1, eos_token_id=vocab_size - 1)
        return GPT2LMHeadModel(cfg)

    def probe_inputs(self, model, n=2, seq=32, gen=None):
        return token_probe(model.config.vocab_size, model.config.n_positions, n, seq, gen)

    def hook_modules(self, model) -> dict:
        return block_hooks(model.transformer.h, lambda b: b.attn.c_proj, lambda b: b.mlp.c_proj)

    def io_spec(self, model) -> dict:
        return {"input": "tokens", "causal": True, "pool": "none", "activation": model.config.activation_function}

    def is_tied(self, model) -> bool:
        return bool(getattr(model.config, "tie_word_embeddings", True))

    def from_canonical(self, view, model, ln_eps=None, tie=None, consume=False):
        from transformers import GPT2LMHeadModel

        h, dh, d = view["blocks.0.attn.q.w"].shape
        config = copy.deepcopy(model.config)
        config.n_embd, config.n_head = d, h
        config.n_inner = view["blocks.0.mlp.in.w"].shape[0]
        if dh * h != d:
            raise UnsupportedModel(f"GPT-2 needs n_head·d_head = n_embd, got {h}·{dh} != {d}")
        if ln_eps is not None:
            config.layer_norm_epsilon = ln_eps
        same = torch.equal(view["embed"], view["head.w"])  # before native_state, which may consume the view
        return rebuild(model, config, self.native_state(view, model, consume), view, "GPT-2", same=same,
                       was_tied=bool(getattr(config, "tie_word_embeddings", True)), tie=tie,
                       head=("lm_head.weight",), cls=GPT2LMHeadModel)
