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
residual maps: only logits / pooler_output are invariant. Both classes load from a directory whose config.json
names them in "architectures" (ViTForImageClassification when it names neither).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from functools import partial

import torch

from glmc.adapters.base import Adapter, Arch, UnsupportedModel
from glmc.adapters.checkpoints import HFCheckpoint
from glmc.adapters.common import (
    ELEMENTWISE,
    VIT_OPTIONS,
    VIT_PRESETS,
    VIT_TRAINING,
    assign_state,
    check_heads,
    check_patch,
    vit_data_spec,
)
from glmc.adapters.namemap import (
    CONV_PATCH,
    HEAD_COLUMNS,
    HEAD_ROWS,
    HEAD_VECTOR,
    TRANSPOSE,
    UNBATCH,
    Entry,
    Layout,
    NameMap,
    layer_norm,
)
from glmc.tasks import task

CLASSES = ("ViTForImageClassification", "ViTModel")

_E, _L = "{p}embeddings.", "{p}layers.{i}."
NAMES = NameMap([
    Entry("cls", _E + "cls_token", UNBATCH),
    Entry("pos_embed", _E + "position_embeddings", UNBATCH),
    Entry("patch.w", _E + "patch_embeddings.projection.weight", CONV_PATCH),
    Entry("patch.b", _E + "patch_embeddings.projection.bias"),
    *[row for x in "qkv" for row in (
        Entry(f"blocks.{{i}}.attn.{x}.w", _L + f"attention.{x}_proj.weight", HEAD_ROWS),
        Entry(f"blocks.{{i}}.attn.{x}.b", _L + f"attention.{x}_proj.bias", HEAD_VECTOR, optional=True))],
    Entry("blocks.{i}.attn.o.w", _L + "attention.o_proj.weight", HEAD_COLUMNS),
    Entry("blocks.{i}.attn.o.b", _L + "attention.o_proj.bias"),
    Entry("blocks.{i}.mlp.in.w", _L + "mlp.fc1.weight"),
    Entry("blocks.{i}.mlp.in.b", _L + "mlp.fc1.bias"),
    Entry("blocks.{i}.mlp.out.w", _L + "mlp.fc2.weight", TRANSPOSE),
    Entry("blocks.{i}.mlp.out.b", _L + "mlp.fc2.bias"),
    *layer_norm("blocks.{i}.ln1", _L + "layernorm_before"),
    *layer_norm("blocks.{i}.ln2", _L + "layernorm_after"),
    *layer_norm("ln_final", "{p}layernorm"),
    Entry("head.w", "{head}.weight"),
    Entry("head.b", "{head}.bias"),
])


def _is_classifier(model) -> bool:
    return type(model).__name__ == "ViTForImageClassification"


class HFViTAdapter(Adapter):
    family = "hf-vit"
    task = "cls"
    names = NAMES
    label = "ViT"
    checkpoint = HFCheckpoint(classes={"vit": CLASSES}, by_architecture=True)
    training = replace(VIT_TRAINING,
        presets=VIT_PRESETS,
        model_options=VIT_OPTIONS,
        variant="hf",
        data_spec=partial(vit_data_spec, variant="hf", pools={"cls": None}))

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
        return Arch(family="hf-vit", task="cls", n_layer=c.num_hidden_layers, d_model=c.hidden_size,
                    n_head=c.num_attention_heads, d_head=c.hidden_size // c.num_attention_heads,
                    d_mlp=c.intermediate_size, activation=c.hidden_act, ln_eps=c.layer_norm_eps)

    def layout(self, model) -> Layout:
        c = model.config
        conv = model.get_submodule(("vit." if _is_classifier(model) else "") + "embeddings.patch_embeddings.projection")
        fields = {"p": "vit.", "head": "classifier"} if _is_classifier(model) else {"p": "", "head": "pooler.dense"}
        return Layout(c.num_hidden_layers, fields, {"n_head": c.num_attention_heads,
                                                    "conv": (conv.in_channels, tuple(conv.kernel_size))})

    def build(self, image_size, patch, channels, num_classes, layers, width, heads, mlp, dropout=0.0,
              activation="gelu"):
        from transformers import ViTConfig, ViTForImageClassification

        check_heads(width, heads)
        check_patch(image_size, patch)
        cfg = ViTConfig(image_size=image_size, patch_size=patch, num_channels=channels, num_labels=num_classes,
                        hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=mlp, hidden_act=activation, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout,
                        layer_norm_eps=1e-6)  # timm's eps, so HF and timm ViTs convert into each other exactly
        return ViTForImageClassification(cfg)

    def native_inputs(self, model, batch):
        return (), {"pixel_values": batch[task(self.task).input_key]}

    def output_logits(self, model, out):
        return out.logits if _is_classifier(model) else out.pooler_output  # ViTModel: the pooled output

    def probe_inputs(self, model, n=2, seq=32, gen=None):
        gen = gen or torch.Generator().manual_seed(0)
        c = model.config
        return torch.randn(n, c.num_channels, c.image_size, c.image_size, generator=gen)

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

    def from_canonical(self, view, model, ln_eps=None, consume=False):
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
        sd = self.native_state(view, model, consume)
        cls = getattr(transformers, type(model).__name__)
        with torch.device("meta"):
            new = cls(config)
        assign_state(new, sd, view, model, type(model).__name__)
        return new.eval()
