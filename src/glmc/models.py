"""Build, save and load the model families glmc works with.

Families: ``gpt2`` (HF ``GPT2LMHeadModel``), ``hf-vit`` (HF ``ViTForImageClassification``) and ``timm-vit``
(timm ``VisionTransformer``).

On-disk format of a model directory:
- HF families: exactly what ``save_pretrained`` writes (``config.json`` + ``model.safetensors``), so
  ``from_pretrained(dir)`` works without glmc.
- timm: ``model.safetensors`` (the state dict, safetensors) and ``timm_config.json``::

      {"format": "glmc-timm-vit", "version": 1,
       "class": "timm.models.vision_transformer.VisionTransformer",
       "kwargs": {"img_size": 28, "patch_size": 7, "in_chans": 1, "num_classes": 10, "embed_dim": 128,
                  "depth": 4, "num_heads": 4, "mlp_ratio": 4.0, "act_layer": "gelu", ...}}

  Rebuild with ``VisionTransformer(**kwargs)`` and ``load_state_dict(safetensors.torch.load_file(...))``;
  one key is glmc's, not timm's: ``"norm_eps": 5e-7`` (present only when not timm's 1e-6) stands for
  ``norm_layer=functools.partial(timm.layers.LayerNorm, eps=5e-7)``, which JSON cannot hold (a wider model
  embedded exactly by glmc rescales the LayerNorm eps).
- optional, every family: ``glmc.json``, the training record written by ``glmc train`` (data spec,
  tokenizer, model and training configuration, metrics; see glmc/train.py), and tokenizer files for LMs.

Loading never unpickles: weights are read from safetensors only (``use_safetensors=True`` for HF).
Saving is atomic: everything is written into a temporary directory beside the target and renamed into place.
"""

import contextlib
import json
from pathlib import Path

import torch

from glmc.io import atomic_dir

RECORD = "glmc.json"
TIMM_CONFIG = "timm_config.json"
TIMM_CLASS = "timm.models.vision_transformer.VisionTransformer"
FAMILIES = ("gpt2", "hf-vit", "timm-vit")


# ---------------------------------------------------------------------------------------------- building

def build_model(family: str, **shape):
    """A freshly initialised model (uses the global torch RNG: seed it first).

    gpt2: vocab_size, context, layers, width, heads, mlp, dropout=0, tied=True, activation='gelu_new'.
    hf-vit / timm-vit: image_size, patch, channels, num_classes, layers, width, heads, mlp, dropout=0,
    activation='gelu'."""
    builders = {"gpt2": _build_gpt2, "hf-vit": _build_hf_vit, "timm-vit": _build_timm_vit}
    if family not in builders:
        raise ValueError(f"unknown model family {family!r}; expected one of {FAMILIES}")
    return builders[family](**shape)


def _build_gpt2(vocab_size, context, layers, width, heads, mlp, dropout=0.0, tied=True, activation="gelu_new"):
    from transformers import GPT2Config, GPT2LMHeadModel

    _check_heads(width, heads)
    cfg = GPT2Config(vocab_size=vocab_size, n_positions=context, n_embd=width, n_layer=layers, n_head=heads,
                     n_inner=mlp, activation_function=activation, resid_pdrop=dropout, embd_pdrop=dropout,
                     attn_pdrop=dropout, tie_word_embeddings=tied,
                     # GPT-2's default ids (50256) may not exist in a small vocabulary
                     bos_token_id=vocab_size - 1, eos_token_id=vocab_size - 1)
    return GPT2LMHeadModel(cfg)


def _build_hf_vit(image_size, patch, channels, num_classes, layers, width, heads, mlp, dropout=0.0,
                  activation="gelu"):
    from transformers import ViTConfig, ViTForImageClassification

    _check_heads(width, heads)
    _check_patch(image_size, patch)
    cfg = ViTConfig(image_size=image_size, patch_size=patch, num_channels=channels, num_labels=num_classes,
                    hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=mlp,
                    hidden_act=activation, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                    layer_norm_eps=1e-6)  # timm's eps, so HF and timm ViTs convert into each other exactly
    return ViTForImageClassification(cfg)


def _build_timm_vit(image_size, patch, channels, num_classes, layers, width, heads, mlp, dropout=0.0,
                    activation="gelu"):
    _check_heads(width, heads)
    _check_patch(image_size, patch)
    kwargs = dict(img_size=image_size, patch_size=patch, in_chans=channels, num_classes=num_classes,
                  embed_dim=width, depth=layers, num_heads=heads, mlp_ratio=mlp / width, act_layer=activation,
                  proj_drop_rate=dropout, attn_drop_rate=dropout)
    model = _timm_from_kwargs(kwargs)
    if model.blocks[0].mlp.fc1.out_features != mlp:
        raise ValueError(f"timm cannot express MLP width {mlp} with embed_dim {width} (mlp_ratio rounding)")
    return model


def _timm_from_kwargs(kwargs: dict):
    from timm.models.vision_transformer import VisionTransformer

    native = dict(kwargs)
    eps = native.pop("norm_eps", None)
    if eps is not None:
        import functools

        from timm.layers import LayerNorm

        native["norm_layer"] = functools.partial(LayerNorm, eps=eps)
    model = VisionTransformer(**native)
    model.glmc_timm_kwargs = dict(kwargs)  # timm does not keep its constructor arguments; save_model needs them
    return model


def _check_heads(width, heads):
    if width % heads:
        raise ValueError(f"width {width} is not divisible by {heads} heads")


def _check_patch(image_size, patch):
    if image_size % patch:
        raise ValueError(f"image size {image_size} is not divisible by patch size {patch}")


def family_of(model) -> str:
    name = type(model).__name__
    if name == "GPT2LMHeadModel":
        return "gpt2"
    if name == "ViTForImageClassification":
        return "hf-vit"
    if name == "VisionTransformer" and type(model).__module__.startswith("timm"):
        return "timm-vit"
    raise ValueError(f"unsupported model class {type(model).__module__}.{name}; glmc handles {FAMILIES}")


def task_of_model(model) -> str:
    return "lm" if family_of(model) == "gpt2" else "cls"


@contextlib.contextmanager
def _quiet_hf():
    """Hide transformers' per-file progress bars ("Loading weights", "Writing model shards") for a moment."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


# ---------------------------------------------------------------------------------------------- saving

def save_model(model, path, record=None, tokenizer=None, overwrite: bool = True):
    """Write `model` (+ glmc.json `record`, + `tokenizer`) to directory `path`, atomically."""
    with atomic_dir(path, overwrite=overwrite) as tmp:
        write_model_files(model, tmp, record, tokenizer)
    return Path(path)


def write_model_files(model, directory: Path, record=None, tokenizer=None) -> None:
    """The files of a model directory, written into an existing (temporary) directory."""
    if family_of(model) == "timm-vit":
        _save_timm(model, directory)
    else:
        with _quiet_hf():
            model.save_pretrained(str(directory))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(directory))
    if record is not None:
        (directory / RECORD).write_text(json.dumps(record, indent=2, sort_keys=False) + "\n")


def _save_timm(model, directory: Path):
    from safetensors.torch import save_file

    kwargs = timm_kwargs(model)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    config = {"format": "glmc-timm-vit", "version": 1, "class": TIMM_CLASS, "kwargs": kwargs}
    (directory / TIMM_CONFIG).write_text(json.dumps(config, indent=2) + "\n")


def timm_kwargs(model) -> dict:
    """The constructor kwargs of a timm ViT: those glmc attached when building/loading it, else inferred from
    its modules and checked by rebuilding (an error names what cannot be inferred)."""
    kwargs = getattr(model, "glmc_timm_kwargs", None) or _infer_timm_kwargs(model)
    _check_timm_kwargs(model, kwargs)
    return kwargs


def _infer_timm_kwargs(model) -> dict:
    from glmc.adapters.timm_vit import activation_name

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


def _check_timm_kwargs(model, kwargs):
    with torch.device("meta"):
        ref = _timm_from_kwargs(kwargs)
    want = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    have = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if want != have:
        diff = sorted(set(want.items()) ^ set(have.items()))[:4]
        raise ValueError(f"timm kwargs {kwargs} do not rebuild this model (first differences: {diff}); "
                         "set model.glmc_timm_kwargs to its constructor arguments")


# ---------------------------------------------------------------------------------------------- loading

def load_model(path):
    """(model in eval mode, glmc.json record or None) from a model directory; see the module docstring."""
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"model directory not found: {path}")
    record = read_record(p)
    if (p / TIMM_CONFIG).is_file():
        model = _load_timm(p)
    elif (p / "config.json").is_file():
        model = _load_hf(p)
    else:
        raise FileNotFoundError(f"{path} holds no model: expected config.json (Hugging Face) or {TIMM_CONFIG} (timm)")
    return model.eval(), record


def read_record(path):
    f = Path(path) / RECORD
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{f} is not valid JSON: {e}") from None


def _require_safetensors(p: Path):
    if not any(p.glob("*.safetensors")):
        pickled = [f.name for f in p.glob("*.bin")] + [f.name for f in p.glob("*.pt*")]
        hint = f" (found {', '.join(pickled)}: pickle files are not loaded; convert to safetensors)" if pickled else ""
        raise FileNotFoundError(f"no *.safetensors weights in {p}{hint}")


def _load_hf(p: Path):
    from transformers import AutoConfig, GPT2LMHeadModel, ViTForImageClassification

    _require_safetensors(p)
    try:
        config = AutoConfig.from_pretrained(str(p), local_files_only=True)
    except (ValueError, OSError) as e:
        raise ValueError(f"invalid config.json in {p}: {e}") from None
    classes = {"gpt2": GPT2LMHeadModel, "vit": ViTForImageClassification}
    if config.model_type not in classes:
        raise ValueError(f"{p}: model_type {config.model_type!r} is not supported (glmc handles gpt2 and vit)")
    with _quiet_hf():
        return classes[config.model_type].from_pretrained(str(p), local_files_only=True, use_safetensors=True)


def _load_timm(p: Path):
    from safetensors.torch import load_file

    try:
        config = json.loads((p / TIMM_CONFIG).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p / TIMM_CONFIG} is not valid JSON: {e}") from None
    if config.get("class", TIMM_CLASS) != TIMM_CLASS or not isinstance(config.get("kwargs"), dict):
        raise ValueError(f"{p / TIMM_CONFIG}: expected class {TIMM_CLASS} and a 'kwargs' object")
    weights = p / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"no model.safetensors in {p}")
    model = _timm_from_kwargs(config["kwargs"])
    try:
        model.load_state_dict(load_file(str(weights)), strict=True)
    except RuntimeError as e:
        raise ValueError(f"{weights} does not match {TIMM_CONFIG}: {e}") from None
    return model
