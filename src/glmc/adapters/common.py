"""Helpers more than one adapter uses: activations known to be elementwise, Hugging Face directory I/O, shape
checks for builders, and the ViT training presets and data sizes (HF and timm ViTs train alike)."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import json
from pathlib import Path

import torch
from huggingface_hub.errors import StrictDataclassError

import glmc.data
from glmc.adapters.base import Training, TrainOption
from glmc.adapters.files import note_pickled, read_pickled, weight_files
from glmc.errors import BadCheckpoint, BadOption, UnsupportedModel
from glmc.tasks import task

ELEMENTWISE = {"gelu_new", "gelu", "relu", "gelu_pytorch_tanh", "gelu_fast", "quick_gelu", "silu", "swish", "tanh",
               "sigmoid", "gelu_accurate", "mish"}

# Model shape and optimisation defaults. "cpu" fits the 5-minute / 2-core targets of issue #4; "paper-*" are the
# shapes of arXiv 2506.22712, meant for a GPU.
VIT_PRESETS = {
    "cpu": dict(layers=4, width=128, heads=4, mlp=256, patch=7, dropout=0.0, batch_size=128, lr=1e-3,
                epochs=6, warmup=200, eval_every=500, eval_batches=None, weight_decay=0.05),
    "paper-cifar": dict(layers=6, width=256, heads=8, mlp=512, patch=4, dropout=0.0, batch_size=128, lr=1e-3,
                        epochs=100, warmup=1000, eval_every=1000, eval_batches=None, weight_decay=0.05),
}
VIT_OPTIONS = ("layers", "width", "heads", "mlp", "dropout", "activation", "patch")


def image_data_shape(ds) -> dict:
    """The sizes an image data set decides for a ViT: image size, channels, classes."""
    if ds.task != "cls":
        raise ValueError(f"a ViT needs image data, got {ds.spec['source']}")
    return {"image_size": ds.image_size, "channels": ds.channels, "num_classes": ds.num_classes}


# `glmc train vit [--family hf|timm]`: the options and data of both ViT adapters (each adds its presets, model
# options, variant and data spec)
VIT_TRAINING = Training(
    command="vit",
    help=("ViT on images: HF ViTForImageClassification (--family hf) or timm VisionTransformer (--family timm). "
          "Presets: cpu (4 layers, width 128, patch 7, 3 epochs), paper-cifar (6 layers, width 256, 8 heads, MLP "
          "512, patch 4)."),
    data=("mnist", "mnist, fashion-mnist, digits, cifar10:DIR, cifar100:DIR or folder:DIR."),
    options=(TrainOption("patch", "count", "Patch size (must divide the image size)."),
             TrainOption("augment", "choice", "[crop-flip for CIFAR, else none]", ("none", "crop-flip")),
             TrainOption("activation", "choice", "", ("gelu", "relu"), default="gelu"),
             TrainOption("pool", "choice", "What the head reads: the class token, or the mean of the patch tokens "
                         "(timm only) [cls].", ("cls", "avg"))),
    data_shape=image_data_shape)


def vit_data_spec(p: dict, given: set, log, *, variant: str, pools: dict) -> dict:
    """`glmc train vit`'s data spec: `pools` maps --pool to the build() pool value of this variant (None: its
    default); a patch the user did not choose is fitted to the image size."""
    pool = p.pop("pool", None)
    if pool and pool not in pools:
        raise BadOption(f"--family {variant} pools the class token only; use --family timm for average pooling")
    if pool and pools[pool] is not None:
        p["pool"] = pools[pool]
    spec = {"source": p["data"], **({"augment": p["augment"]} if p.get("augment") else {})}
    if "patch" not in given:
        p["patch"] = fitting_patch(spec, p["patch"], log)
    return spec


def fitting_patch(spec: dict, patch: int, log) -> int:
    """The preset's patch, or the largest smaller one that divides the image size (8×8 digits, 32×32 CIFAR)."""
    size = image_data_shape(glmc.data.load(glmc.data.parse_spec(spec)))["image_size"]  # refuses other data by name
    fitted = max(d for d in range(1, min(patch, size) + 1) if size % d == 0)
    if fitted != patch:
        log(f"patch {patch} does not divide image size {size}; using patch {fitted}")
    return fitted


def check_heads(width, heads):
    if width % heads:
        raise ValueError(f"width {width} is not divisible by {heads} heads")


def check_patch(image_size, patch):
    if image_size % patch:
        raise ValueError(f"image size {image_size} is not divisible by patch size {patch}")


# ---------------------------------------------------------------------------------------------- Hugging Face files

@contextlib.contextmanager
def quiet_hf():
    """Hide transformers' per-file progress bars ("Loading weights", "Writing model shards") for a moment."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


# what a config class raises for a config.json it cannot use: huggingface_hub's strict dataclasses (transformers 5
# configs) raise their own error for a field of the wrong type ("n_layer": "two"), which is not a ValueError
CONFIG_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OSError, StrictDataclassError)


def short_message(e: BaseException) -> str:
    """An exception's message on one line: its first two lines (huggingface_hub puts the field on the first and
    the problem on the second), or its type's name."""
    text = " ".join(str(e).split("\n")[:2]) if str(e).strip() else type(e).__name__
    return " ".join(text.split())


def hf_config(path) -> dict | None:
    """The parsed config.json of a Hugging Face model directory, or None if it has none."""
    f = Path(path) / "config.json"
    if not f.is_file():
        return None
    try:
        config = json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise BadCheckpoint(f"invalid config.json in {path}: {e} (fix the file, or save the model again)") from None
    if not isinstance(config, dict):
        raise BadCheckpoint(f"invalid config.json in {path}: it holds a JSON {type(config).__name__}, not an object "
                            "({\"model_type\": ..., ...}); save the model's config with save_pretrained")
    return config


def load_pretrained(model_class, path, renames: dict | None = None):
    """`model_class.from_pretrained(path)` from local files only (never a hub), in the dtype the weights are stored
    in: safetensors (single or sharded), or else pytorch_model.bin (single or sharded) read by
    torch.load(weights_only=True) only (glmc/adapters/files.py). `renames`, the loading adapter's
    (Adapter.checkpoint.renames), are applied to stored names (from_pretrained's key_mapping)."""

    p = Path(path)
    kind, files = weight_files(p)
    if kind is None:
        pickled = [f.name for f in p.glob("*.pt*")] + [f.name for f in p.glob("*.ckpt")]
        hint = f" (found {', '.join(pickled)}: glmc reads pytorch_model.bin only among pickle files)" if pickled else ""
        raise FileNotFoundError(f"no *.safetensors or pytorch_model.bin weights in {p}{hint}")
    try:
        config = model_class.config_class.from_pretrained(str(p), local_files_only=True)
    except CONFIG_ERRORS as e:
        raise BadCheckpoint(f"invalid config.json in {p}: {short_message(e)}") from None
    options = dict(config=config, local_files_only=True, dtype="auto")
    if renames:
        options["key_mapping"] = dict(renames)
    with quiet_hf():
        if kind == "safetensors":
            return model_class.from_pretrained(str(p), use_safetensors=True, **options)
        state = read_pickled(files)
        note_pickled(p, files)
        return model_class.from_pretrained(None, state_dict=state, **options)


# glmc writes weights above this size as shards model-0000k-of-0000n.safetensors with model.safetensors.index.json
# (transformers' own default is 50GB); write_model_files sets another for one write (glmc ... --max-shard-size)
DEFAULT_MAX_SHARD_SIZE = "5GB"
MAX_SHARD_SIZE: contextvars.ContextVar = contextvars.ContextVar("max_shard_size", default=DEFAULT_MAX_SHARD_SIZE)


def save_pretrained(model, directory) -> None:
    """Exactly what `save_pretrained` writes (config.json + model.safetensors, or shards with their index above
    MAX_SHARD_SIZE), so transformers loads it alone."""
    with quiet_hf():
        model.save_pretrained(str(directory), max_shard_size=MAX_SHARD_SIZE.get())


def hf_expected_weights(path, class_name: str, label: str) -> dict | None:
    """{name on disk: shape} of every parameter of the transformers model config.json describes (tied ones once),
    built on the meta device (no memory, no weights) and named as save_pretrained names them, with the class's
    base_model_prefix under key None. None if this transformers version does not expose its on-disk naming."""
    # transformers 5 renames some weights between modules and files; save_pretrained applies this
    if importlib.util.find_spec("transformers.core_model_loading") is None:
        return None
    try:
        text = (Path(path) / "config.json").read_text()
    except (OSError, UnicodeDecodeError):
        text = None  # from_pretrained below names the problem
    try:
        return dict(_expected_weights(str(path) if text is None else None, text, class_name))
    except CONFIG_ERRORS as e:
        raise BadCheckpoint(f"{Path(path) / 'config.json'} does not describe a valid {label} model: "
                            f"{short_message(e)}") from e


@functools.lru_cache(maxsize=8)
def _expected_weights(path, text, class_name: str) -> tuple:
    """hf_expected_weights' answer as (name, shape) pairs, cached by config text: an aligned pair shares one config,
    and building the meta model took 1.3 s of a 124M alignment per model."""
    import transformers
    from transformers.core_model_loading import revert_weight_conversion

    cls = getattr(transformers, class_name)
    if text is None:
        config = cls.config_class.from_pretrained(path, local_files_only=True)
    else:
        config = cls.config_class.from_dict(json.loads(text))
    with torch.device("meta"):
        model = cls(config)
    on_disk = revert_weight_conversion(model, dict(model.named_parameters()))
    return tuple((n, tuple(t.shape)) for n, t in on_disk.items()) + ((None, cls.base_model_prefix),)


def token_probe(vocab_size: int, positions: int, n: int, seq: int, gen=None):
    """Random token ids a causal LM accepts: n sequences of at most `positions` tokens."""
    gen = gen or torch.Generator().manual_seed(0)
    return torch.randint(0, vocab_size, (n, min(seq, positions)), generator=gen)


def block_hooks(blocks, attn_out, mlp_out) -> dict:
    """Activation matching's hook points from a model's blocks and, per block, its attention output projection and
    MLP output projection (callables block -> module)."""
    out = {}
    for i, block in enumerate(blocks):
        out.update({f"blocks.{i}": block, f"blocks.{i}.attn.o": attn_out(block), f"blocks.{i}.mlp.out": mlp_out(block)})
    return out


class TokenLM:
    """What the Hugging Face causal LMs share (mixed in before Adapter): save_pretrained files, build() sizes from
    text data, and token ids in without a key/value cache."""

    family: str
    task: str

    def native_inputs(self, model, batch):
        return (), {"input_ids": batch[task(self.task).input_key], "use_cache": False}


def rebuild(model, config, state: dict, view: dict, name: str, *, same: bool, was_tied: bool, tie, head: tuple,
            cls=None):
    """A native model of `config` (class `cls`, default `model`'s) holding `state`: its head tied to the embedding
    when the view allows it (`same`: the two are equal) and the model was tied (`was_tied`), unless `tie` says
    otherwise (False: untie; True: tie where allowed). `head`: the head's parameter names a tied model lacks."""
    config.tie_word_embeddings = same and (was_tied if tie is None else bool(tie))
    tied = config.tie_word_embeddings
    with torch.device("meta"):
        new = (cls or type(model))(config)
    assign_state(new, state, view, model, name, may_miss=set(head) if tied else ())
    if tied:
        new.tie_weights()
    return new.eval()


def assign_state(new, state: dict, view: dict, source, name: str, may_miss=()):
    """Fill `new`, a model built on the meta device, with the native `state` by assignment: each tensor becomes
    the parameter itself, so a rebuild holds the weights once rather than twice (to_empty + load_state_dict
    copies every tensor). Tensors that share storage with the canonical `view` are copied first (a parameter
    written in place, as interpolation does, must never write into the view). Buffers the state lacks (RoPE
    frequencies) are taken from `source`, which has the same ones. `may_miss`: parameters the state may lack (a
    tied head, which the caller ties)."""
    shared = {v.untyped_storage().data_ptr() for v in view.values()}
    own = {}
    for k, t in state.items():
        t = t.contiguous()
        own[k] = t.clone() if t.untyped_storage().data_ptr() in shared else t
    missing, unexpected = new.load_state_dict(own, strict=False, assign=True)
    params = dict(new.named_parameters(remove_duplicate=False))
    bad = [k for k in missing if k in params and k not in may_miss]
    if unexpected or bad:
        raise RuntimeError(f"{name} rebuild mismatch: missing {bad}, unexpected {unexpected}")
    old = dict(source.named_buffers())
    device = next(iter(own.values())).device
    for mod_name, module in new.named_modules():
        for b_name, buf in list(module.named_buffers(recurse=False)):
            if buf.device.type != "meta":
                continue
            full = f"{mod_name}.{b_name}" if mod_name else b_name
            if full not in old or old[full].shape != buf.shape:
                raise UnsupportedModel(f"cannot rebuild buffer {full} of a reshaped {name}")
            persistent = b_name not in module._non_persistent_buffers_set
            module.register_buffer(b_name, old[full].detach().to(device).clone(), persistent=persistent)
    return new


class RotaryLM:
    """What the Hugging Face decoders with rotary positions share (mixed in beside TokenLM before Adapter: the RoPE
    decoders, GPT-NeoX): probe inputs up to
    `max_position_embeddings`, no circuit form, and a head tied when `tie_word_embeddings` says so (untying
    rebuilds it from the canonical view)."""

    def probe_inputs(self, model, n=2, seq=32, gen=None):
        return token_probe(model.config.vocab_size, model.config.max_position_embeddings, n, seq, gen)

    def io_spec(self, model) -> dict:
        raise UnsupportedModel("circuit mode does not exist under rotary position embeddings: a query/key circuit "
                               "Q̂ᵀK̂ depends on the positions' offset; use --mode native")

    def is_tied(self, model) -> bool:
        return bool(getattr(model.config, "tie_word_embeddings", False))

