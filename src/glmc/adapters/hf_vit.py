"""Hugging Face ViTForImageClassification (and ViTModel with its pooler) ⇄ canonical view.

Native layout in transformers 5.x (nn.Linear, weight [out, in], x·Wᵀ + b; prefix ``vit.`` for the classifier):
  embeddings.cls_token [1, 1, d], embeddings.position_embeddings [1, 1+P, d] (entry 0 is the CLS position)
  embeddings.patch_embeddings.projection: Conv2d(C, d, p, stride p), weight [d, C, p, p]
  layers.{i}.attention.{q,k,v}_proj [H·d_head, d] (head-major rows; bias only if config.qkv_bias)
  layers.{i}.attention.o_proj [d, H·d_head]; layers.{i}.mlp.fc1 [n, d], fc2 [d, n]
  layers.{i}.layernorm_before / layernorm_after; layernorm (final)
  classifier [classes, d] reads sequence_output[:, 0] (the CLS token after the final LayerNorm);
  ViTModel: pooler.dense [p, d] reads the same token (then tanh) — the role of the head.
Every other output of the encoder (ViTModel.last_hidden_state) is the residual stream itself and is rotated by
residual maps: only logits / pooler_output are invariant.
"""

from __future__ import annotations

import copy

import torch

from glmc.adapters.base import Adapter, Arch, UnsupportedModel, patch_from_conv, patch_to_conv
from glmc.adapters.gpt2 import ELEMENTWISE

CLASSES = ("ViTForImageClassification", "ViTModel")


def _prefix(model) -> str:
    return "vit." if type(model).__name__ == "ViTForImageClassification" else ""


def _head_key(model) -> str:
    return "classifier" if type(model).__name__ == "ViTForImageClassification" else "pooler.dense"


class HFViTAdapter(Adapter):
    family = "hf-vit"

    @staticmethod
    def matches(model) -> bool:
        return type(model).__name__ in CLASSES and type(model).__module__.startswith("transformers.")

    def check_supported(self, model) -> None:
        c = model.config
        name = type(model).__name__
        if not isinstance(c.hidden_act, str) or c.hidden_act not in ELEMENTWISE:
            raise UnsupportedModel(f"ViT activation {c.hidden_act!r} is not a known elementwise function, so "
                                   "MLP unit permutations may not preserve the function")
        if name == "ViTForImageClassification" and not isinstance(model.classifier, torch.nn.Linear):
            raise UnsupportedModel("ViTForImageClassification with num_labels=0 (no classifier): its output is the "
                                   "residual stream itself, which residual maps rotate")
        if name == "ViTModel":
            if model.pooler is None:
                raise UnsupportedModel("ViTModel without a pooler (add_pooling_layer=False): its only output is the "
                                       "residual stream (last_hidden_state), which residual maps rotate")
            if model.embeddings.mask_token is not None:
                raise UnsupportedModel("ViTModel with a mask token (use_mask_token=True): glmc does not transform it")
        head_dim = getattr(c, "head_dim", None)
        if head_dim is not None and head_dim * c.num_attention_heads != c.hidden_size:
            raise UnsupportedModel(f"config.head_dim={head_dim} with num_attention_heads·head_dim != hidden_size")
        if c.hidden_size % c.num_attention_heads:
            raise UnsupportedModel("hidden_size is not divisible by num_attention_heads")

    def arch(self, model) -> Arch:
        c = model.config
        return Arch("hf-vit", "cls", c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
                    c.hidden_size // c.num_attention_heads, c.intermediate_size, c.hidden_act, c.layer_norm_eps)

    def to_canonical(self, model) -> dict[str, torch.Tensor]:
        self.check_supported(model)
        sd = {k: t.detach() for k, t in model.state_dict().items()}
        c, p = model.config, _prefix(model)
        h = c.num_attention_heads
        e = p + "embeddings."
        v = {"cls": sd[e + "cls_token"][0].clone(), "pos_embed": sd[e + "position_embeddings"][0].clone(),
             "patch.w": patch_from_conv(sd[e + "patch_embeddings.projection.weight"]),
             "patch.b": sd[e + "patch_embeddings.projection.bias"].clone()}
        for i in range(c.num_hidden_layers):
            n, b = f"{p}layers.{i}.", f"blocks.{i}."
            for name in "qkv":
                w = sd[n + f"attention.{name}_proj.weight"]  # [H·d_head, d], head-major rows
                v[b + f"attn.{name}.w"] = w.reshape(h, -1, w.shape[-1]).clone()
                if n + f"attention.{name}_proj.bias" in sd:
                    v[b + f"attn.{name}.b"] = sd[n + f"attention.{name}_proj.bias"].reshape(h, -1).clone()
            wo = sd[n + "attention.o_proj.weight"]  # [d, H·d_head]
            v[b + "attn.o.w"] = wo.T.reshape(h, -1, wo.shape[0]).clone()
            v[b + "attn.o.b"] = sd[n + "attention.o_proj.bias"].clone()
            v[b + "mlp.in.w"] = sd[n + "mlp.fc1.weight"].clone()
            v[b + "mlp.in.b"] = sd[n + "mlp.fc1.bias"].clone()
            v[b + "mlp.out.w"] = sd[n + "mlp.fc2.weight"].T.clone()
            v[b + "mlp.out.b"] = sd[n + "mlp.fc2.bias"].clone()
            for ln, native in (("ln1", "layernorm_before"), ("ln2", "layernorm_after")):
                v[b + f"{ln}.w"] = sd[n + f"{native}.weight"].clone()
                v[b + f"{ln}.b"] = sd[n + f"{native}.bias"].clone()
        v["ln_final.w"] = sd[p + "layernorm.weight"].clone()
        v["ln_final.b"] = sd[p + "layernorm.bias"].clone()
        v["head.w"] = sd[_head_key(model) + ".weight"].clone()
        v["head.b"] = sd[_head_key(model) + ".bias"].clone()
        return v

    def io_spec(self, model) -> dict:
        if type(model).__name__ != "ViTForImageClassification":
            raise UnsupportedModel("circuit form: only ViTForImageClassification (ViTModel's pooler is not a head)")
        conv = model.vit.embeddings.patch_embeddings.projection
        return {"input": "patches", "channels": conv.in_channels, "patch": list(conv.kernel_size), "causal": False,
                "pool": "cls", "activation": model.config.hidden_act}

    def hook_modules(self, model) -> dict:
        base = model.vit if hasattr(model, "vit") else model
        out = {}
        for i, layer in enumerate(base.layers):
            out.update({f"blocks.{i}": layer, f"blocks.{i}.attn.o": layer.attention.o_proj,
                        f"blocks.{i}.mlp.out": layer.mlp.fc2})
        return out

    def native_state(self, view, model) -> dict:
        """Native parameter tensors for `view` (differentiable: reshapes, transposes and concatenations only)."""
        h, dh, d = view["blocks.0.attn.q.w"].shape
        qkv_bias = "blocks.0.attn.q.b" in view
        p, e = _prefix(model), _prefix(model) + "embeddings."
        conv = model.get_submodule(e + "patch_embeddings.projection")
        sd = {e + "cls_token": view["cls"][None], e + "position_embeddings": view["pos_embed"][None],
              e + "patch_embeddings.projection.weight": patch_to_conv(view["patch.w"], conv.in_channels,
                                                                        conv.kernel_size),
              e + "patch_embeddings.projection.bias": view["patch.b"],
              p + "layernorm.weight": view["ln_final.w"], p + "layernorm.bias": view["ln_final.b"],
              _head_key(model) + ".weight": view["head.w"], _head_key(model) + ".bias": view["head.b"]}
        for i in range(model.config.num_hidden_layers):
            n, b = f"{p}layers.{i}.", f"blocks.{i}."
            for name in "qkv":
                sd[n + f"attention.{name}_proj.weight"] = view[b + f"attn.{name}.w"].reshape(h * dh, d)
                if qkv_bias:
                    sd[n + f"attention.{name}_proj.bias"] = view[b + f"attn.{name}.b"].reshape(h * dh)
            sd[n + "attention.o_proj.weight"] = view[b + "attn.o.w"].reshape(h * dh, d).T
            sd[n + "attention.o_proj.bias"] = view[b + "attn.o.b"]
            sd[n + "mlp.fc1.weight"] = view[b + "mlp.in.w"]
            sd[n + "mlp.fc1.bias"] = view[b + "mlp.in.b"]
            sd[n + "mlp.fc2.weight"] = view[b + "mlp.out.w"].T
            sd[n + "mlp.fc2.bias"] = view[b + "mlp.out.b"]
            for ln, native in (("ln1", "layernorm_before"), ("ln2", "layernorm_after")):
                sd[n + f"{native}.weight"] = view[b + f"{ln}.w"]
                sd[n + f"{native}.bias"] = view[b + f"{ln}.b"]
        return sd

    def from_canonical(self, view, model, ln_eps=None):
        import transformers

        self.check_supported(model)
        h, dh, d = view["blocks.0.attn.q.w"].shape
        if dh * h != d:
            raise UnsupportedModel(f"HF ViT needs num_attention_heads·head_dim = hidden_size, got {h}·{dh} != {d}")
        qkv_bias = "blocks.0.attn.q.b" in view
        config = copy.deepcopy(model.config)
        config.hidden_size, config.num_attention_heads = d, h
        config.intermediate_size = view["blocks.0.mlp.in.w"].shape[0]
        config.qkv_bias = qkv_bias
        if getattr(config, "head_dim", None) is not None:
            config.head_dim = dh
        if ln_eps is not None:
            config.layer_norm_eps = ln_eps
        if type(model).__name__ == "ViTModel":
            config.pooler_output_size = view["head.w"].shape[0]
        else:
            if view["head.w"].shape[0] != config.num_labels:
                raise ValueError(f"head has {view['head.w'].shape[0]} classes, config {config.num_labels}")
        sd = self.native_state(view, model)
        cls = getattr(transformers, type(model).__name__)
        with torch.device("meta"):
            new = cls(config)
        new = new.to_empty(device=view["patch.w"].device)
        new.load_state_dict({k: t.contiguous() for k, t in sd.items()}, strict=True)
        return new.eval()
