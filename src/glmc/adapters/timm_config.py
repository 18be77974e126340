"""timm VisionTransformer constructor arguments and glmc's on-disk format for it.

A directory holds ``model.safetensors`` (the state dict) and ``timm_config.json``::

    {"format": "glmc-timm-vit", "version": 1,
     "class": "timm.models.vision_transformer.VisionTransformer",
     "kwargs": {"img_size": 28, "patch_size": 7, "in_chans": 1, "num_classes": 10, "embed_dim": 128, ...}}

Rebuild with ``VisionTransformer(**kwargs)`` and ``load_state_dict(safetensors.torch.load_file(...))``; one
key is glmc's, not timm's: ``"norm_eps": 5e-7`` (present only when not timm's 1e-6) stands for
``norm_layer=functools.partial(timm.layers.LayerNorm, eps=5e-7)``, which JSON cannot hold (a wider model
embedded exactly by glmc rescales the LayerNorm eps).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch
from torch import nn

TIMM_CONFIG = "timm_config.json"
TIMM_CLASS = "timm.models.vision_transformer.VisionTransformer"


def activation_name(act: nn.Module) -> str | None:
    """timm's name (get_act_layer) of an elementwise MLP activation, or None if not one glmc knows."""
    from timm.layers.activations import GELU, GELUTanh, QuickGELU

    if isinstance(act, nn.GELU):
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(act.approximate)
    for cls, name in ((GELU, "gelu"), (GELUTanh, "gelu_tanh"), (QuickGELU, "quick_gelu"), (nn.ReLU, "relu"),
                      (nn.SiLU, "silu")):
        if type(act) is cls:
            return name
    return None


def timm_from_kwargs(kwargs: dict):
    from timm.models.vision_transformer import VisionTransformer

    native = dict(kwargs)
    eps = native.pop("norm_eps", None)
    if eps is not None:
        from timm.layers import LayerNorm

        native["norm_layer"] = functools.partial(LayerNorm, eps=eps)
    model = VisionTransformer(**native)
    model.glmc_timm_kwargs = dict(kwargs)  # timm does not keep its constructor arguments; saving needs them
    return model


def timm_kwargs(model) -> dict:
    """The constructor kwargs of a timm ViT: those glmc attached when building/loading it, else inferred from
    its modules and checked by rebuilding (an error names what cannot be inferred)."""
    kwargs = getattr(model, "glmc_timm_kwargs", None) or _infer_kwargs(model)
    _check_kwargs(model, kwargs)
    return kwargs


def _infer_kwargs(model) -> dict:
    b = model.blocks[0]
    act = activation_name(b.mlp.act)
    if act is None:
        raise ValueError(f"cannot record timm activation {b.mlp.act!r}; set model.glmc_timm_kwargs")
    eps = b.norm1.eps
    extra = {"norm_eps": eps} if eps != 1e-6 else {}
    return extra | dict(img_size=list(model.patch_embed.img_size), patch_size=list(model.patch_embed.patch_size),
                in_chans=model.patch_embed.proj.in_channels, num_classes=model.num_classes,
                embed_dim=model.embed_dim, depth=len(model.blocks), num_heads=b.attn.num_heads,
                mlp_ratio=b.mlp.fc1.out_features / model.embed_dim, qkv_bias=b.attn.qkv.bias is not None,
                qk_norm=not isinstance(b.attn.q_norm, torch.nn.Identity), class_token=model.cls_token is not None,
                global_pool=model.global_pool, reg_tokens=model.num_reg_tokens, no_embed_class=model.no_embed_class,
                pre_norm=not isinstance(model.norm_pre, torch.nn.Identity),
                fc_norm=not isinstance(model.fc_norm, torch.nn.Identity),
                init_values=1e-5 if hasattr(b.ls1, "gamma") else None, act_layer=act,
                proj_bias=b.attn.proj.bias is not None, pos_embed="learn" if model.pos_embed is not None else "none",
                final_norm=not (isinstance(model.norm, torch.nn.Identity)
                                and isinstance(model.fc_norm, torch.nn.Identity)),
                pool_include_prefix=model.pool_include_prefix, dynamic_img_size=model.dynamic_img_size,
                dynamic_img_pad=model.patch_embed.dynamic_img_pad)


def _check_kwargs(model, kwargs):
    with torch.device("meta"):
        ref = timm_from_kwargs(kwargs)
    want = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    have = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if want != have:
        diff = sorted(set(want.items()) ^ set(have.items()))[:4]
        raise ValueError(f"timm kwargs {kwargs} do not rebuild this model (first differences: {diff}); "
                         "set model.glmc_timm_kwargs to its constructor arguments")


def save_timm(model, directory: Path) -> None:
    from safetensors.torch import save_file

    kwargs = timm_kwargs(model)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(Path(directory) / "model.safetensors"), metadata={"format": "pt"})
    config = {"format": "glmc-timm-vit", "version": 1, "class": TIMM_CLASS, "kwargs": kwargs}
    (Path(directory) / TIMM_CONFIG).write_text(json.dumps(config, indent=2) + "\n")


def load_timm(p: Path):
    from safetensors.torch import load_file

    p = Path(p)
    try:
        config = json.loads((p / TIMM_CONFIG).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p / TIMM_CONFIG} is not valid JSON: {e}") from None
    if not isinstance(config, dict) or config.get("class", TIMM_CLASS) != TIMM_CLASS or not isinstance(
            config.get("kwargs"), dict):
        raise ValueError(f"{p / TIMM_CONFIG}: expected class {TIMM_CLASS} and a 'kwargs' object")
    weights = p / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"no model.safetensors in {p}")
    model = timm_from_kwargs(config["kwargs"])
    try:
        model.load_state_dict(load_file(str(weights)), strict=True)
    except RuntimeError as e:
        raise ValueError(f"{weights} does not match {TIMM_CONFIG}: {e}") from None
    return model
