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

from glmc.adapters.base import Adapter, Arch, UnsupportedModel, heads_from_columns, heads_to_columns

ELEMENTWISE = {"gelu_new", "gelu", "relu", "gelu_pytorch_tanh", "gelu_fast", "quick_gelu", "silu", "swish", "tanh",
               "sigmoid", "gelu_accurate", "mish"}


class GPT2Adapter(Adapter):
    family = "gpt2"

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
        return Arch("gpt2", "lm", c.n_layer, c.n_embd, c.n_head, c.n_embd // c.n_head,
                    c.n_inner or 4 * c.n_embd, "relu" if c.activation_function == "relu" else c.activation_function,
                    c.layer_norm_epsilon)

    def to_canonical(self, model) -> dict[str, torch.Tensor]:
        self.check_supported(model)
        sd = {k: v.detach() for k, v in model.state_dict().items()}
        c = model.config
        d, h = c.n_embd, c.n_head
        v = {"embed": sd["transformer.wte.weight"].clone(), "pos_embed": sd["transformer.wpe.weight"].clone()}
        for i in range(c.n_layer):
            p, b = f"transformer.h.{i}.", f"blocks.{i}."
            w_qkv, b_qkv = sd[p + "attn.c_attn.weight"], sd[p + "attn.c_attn.bias"]
            for j, name in enumerate("qkv"):
                v[b + f"attn.{name}.w"] = heads_from_columns(w_qkv[:, j * d:(j + 1) * d], h).clone()
                v[b + f"attn.{name}.b"] = b_qkv[j * d:(j + 1) * d].reshape(h, d // h).clone()
            v[b + "attn.o.w"] = sd[p + "attn.c_proj.weight"].reshape(h, d // h, d).clone()
            v[b + "attn.o.b"] = sd[p + "attn.c_proj.bias"].clone()
            v[b + "mlp.in.w"] = sd[p + "mlp.c_fc.weight"].T.clone()
            v[b + "mlp.in.b"] = sd[p + "mlp.c_fc.bias"].clone()
            v[b + "mlp.out.w"] = sd[p + "mlp.c_proj.weight"].clone()
            v[b + "mlp.out.b"] = sd[p + "mlp.c_proj.bias"].clone()
            for ln, native in (("ln1", "ln_1"), ("ln2", "ln_2")):
                v[b + f"{ln}.w"] = sd[p + f"{native}.weight"].clone()
                v[b + f"{ln}.b"] = sd[p + f"{native}.bias"].clone()
        v["ln_final.w"] = sd["transformer.ln_f.weight"].clone()
        v["ln_final.b"] = sd["transformer.ln_f.bias"].clone()
        v["head.w"] = sd.get("lm_head.weight", sd["transformer.wte.weight"]).clone()
        return v

    def hook_modules(self, model) -> dict:
        out = {}
        for i, block in enumerate(model.transformer.h):
            out.update({f"blocks.{i}": block, f"blocks.{i}.attn.o": block.attn.c_proj,
                        f"blocks.{i}.mlp.out": block.mlp.c_proj})
        return out

    def io_spec(self, model) -> dict:
        return {"input": "tokens", "causal": True, "pool": "none", "activation": model.config.activation_function}

    def is_tied(self, model) -> bool:
        return bool(getattr(model.config, "tie_word_embeddings", True))

    def untie(self, model):
        return self.from_canonical(self.to_canonical(model), model, tie=False) if self.is_tied(model) else model

    def native_state(self, view, model) -> dict:
        """Native parameter tensors for `view` (differentiable: reshapes, transposes and concatenations only)."""
        h, dh, d = view["blocks.0.attn.q.w"].shape
        sd = {"transformer.wte.weight": view["embed"], "transformer.wpe.weight": view["pos_embed"],
              "transformer.ln_f.weight": view["ln_final.w"], "transformer.ln_f.bias": view["ln_final.b"],
              "lm_head.weight": view["head.w"]}
        for i in range(model.config.n_layer):
            p, b = f"transformer.h.{i}.", f"blocks.{i}."
            sd[p + "attn.c_attn.weight"] = torch.cat([heads_to_columns(view[b + f"attn.{n}.w"]) for n in "qkv"], 1)
            sd[p + "attn.c_attn.bias"] = torch.cat([view[b + f"attn.{n}.b"].reshape(-1) for n in "qkv"])
            sd[p + "attn.c_proj.weight"] = view[b + "attn.o.w"].reshape(h * dh, d)
            sd[p + "attn.c_proj.bias"] = view[b + "attn.o.b"]
            sd[p + "mlp.c_fc.weight"] = view[b + "mlp.in.w"].T
            sd[p + "mlp.c_fc.bias"] = view[b + "mlp.in.b"]
            sd[p + "mlp.c_proj.weight"] = view[b + "mlp.out.w"]
            sd[p + "mlp.c_proj.bias"] = view[b + "mlp.out.b"]
            for ln, native in (("ln1", "ln_1"), ("ln2", "ln_2")):
                sd[p + f"{native}.weight"] = view[b + f"{ln}.w"]
                sd[p + f"{native}.bias"] = view[b + f"{ln}.b"]
        return sd

    def from_canonical(self, view, model, ln_eps=None, tie=None):
        from transformers import GPT2LMHeadModel

        h, dh, d = view["blocks.0.attn.q.w"].shape
        config = copy.deepcopy(model.config)
        config.n_embd, config.n_head = d, h
        config.n_inner = view["blocks.0.mlp.in.w"].shape[0]
        if dh * h != d:
            raise UnsupportedModel(f"GPT-2 needs n_head·d_head = n_embd, got {h}·{dh} != {d}")
        if ln_eps is not None:
            config.layer_norm_epsilon = ln_eps
        # keep the head tied when the model was tied and the view still allows it, unless told otherwise
        tied = bool(getattr(config, "tie_word_embeddings", True)) and torch.equal(view["embed"], view["head.w"])
        tied = tied if tie is None else (tie and torch.equal(view["embed"], view["head.w"]))
        config.tie_word_embeddings = tied
        sd = self.native_state(view, model)
        with torch.device("meta"):
            new = GPT2LMHeadModel(config)
        new = new.to_empty(device=view["embed"].device)
        sd = {k: t.contiguous() for k, t in sd.items()}
        missing, unexpected = new.load_state_dict(sd, strict=False)
        # buffers (causal masks) are not in the view; any missing *parameter* is a bug
        bad = [k for k in missing if k in dict(new.named_parameters()) and not (tied and k == "lm_head.weight")]
        if bad or unexpected:
            raise RuntimeError(f"GPT-2 rebuild mismatch: missing {bad}, unexpected {unexpected}")
        if tied:
            new.tie_weights()
        return new.eval()
