"""Checkpoint validation at the load boundary: what the commands call instead of loading a model directory
directly, so that a bad checkpoint is refused with one line naming the problem (glmc.errors.BadCheckpoint,
UnsupportedModel) before any work is done, and never half-used.

    model, record = load_checked(path)          # files checked, model loaded, weights checked
    check_group(models, paths)                  # same family, depth and width-independent shapes

Checked before anything is loaded (from the files alone; nothing is unpickled except through
torch.load(weights_only=True), no safetensors weight data is read):
- the directory holds a model: not empty, a config (config.json or timm_config.json), weights: *.safetensors
  (single or sharded with an index whose every shard is there), or else pytorch_model.bin (single or sharded),
  read only through torch.load(weights_only=True) (glmc/adapters/files.py; other pickle files are refused);
- config.json / timm_config.json / glmc.json are valid JSON, and exactly one of glmc's families claims the directory;
- every weight file's header is readable (a truncated or corrupt file is refused);
- for Hugging Face models: every parameter the config implies is in the files (under its stored name or one
  transformers renames on load), with that shape and a floating-point dtype (a missing weight would otherwise be
  randomly initialised by transformers).
Checked after loading: every parameter is finite (the first NaN/inf one is named).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from glmc.adapters import adapter_for, adapter_for_dir, adapters, canonical_shapes
from glmc.adapters.files import pickled_headers, renamed, weight_files
from glmc.errors import BadCheckpoint, IncompatibleModels, UnsupportedModel
from glmc.memory import FilePages, register_weight_files, trim
from glmc.models import load_model
from glmc.tasks import task as get_task

RECORD = "glmc.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
RESAVE = "re-save it (save_pretrained(..., safe_serialization=True)) or copy it again"


def load_checked(path):
    """(model in eval mode, glmc.json record or None) from a model directory, refusing bad checkpoints with
    BadCheckpoint / UnsupportedModel (see the module docstring). The files are only read."""
    p = Path(path)
    check_files(p)
    try:
        model, record = load_model(p)
    except (UnsupportedModel, BadCheckpoint):
        raise
    except (ValueError, OSError) as e:  # what the loaders raise for a checkpoint they cannot read
        raise BadCheckpoint(f"cannot load {path}: {_first_line(e)}") from e
    except Exception as e:  # safetensors' own error type is not importable under a stable name
        if type(e).__name__ != "SafetensorError":
            raise
        raise BadCheckpoint(f"cannot load {path}: corrupt safetensors file ({_first_line(e)}); {RESAVE}") from e
    check_finite(model, path)
    trim(force=True)
    return model, record


def config_files() -> dict[str, str]:
    """{config file name: whose format it is} of every registered family (Adapter.checkpoint)."""
    return {cls.checkpoint.config_file: cls.checkpoint.config_format for cls in adapters()}


def check_files(path) -> None:
    """Everything about the directory `path` that can be checked without loading the model."""
    configs = config_files()
    either = " or ".join(configs)
    p = Path(path)
    if not p.exists():
        raise BadCheckpoint(f"model directory not found: {path}")
    if not p.is_dir():
        raise BadCheckpoint(f"{path} is a file, not a model directory (give the directory that holds "
                            f"{either} and *.safetensors)")
    files = sorted(f.name for f in p.iterdir() if f.is_file())
    if not files:
        raise BadCheckpoint(f"{path} is empty: expected a model directory ({either} and "
                            "model.safetensors, as glmc train or save_pretrained writes)")

    kind, weights = weight_files(p)
    pickled = [f for f in files if f.endswith(PICKLE_SUFFIXES)]
    if kind is None and pickled:
        raise BadCheckpoint(f"{path} has only pickle weights ({', '.join(pickled)}) and no pytorch_model.bin: glmc "
                            "reads no other pickle file; convert to safetensors (save_pretrained(DIR))")
    if not any((p / name).is_file() for name in configs):
        listed = ", ".join(files[:6]) + (", …" if len(files) > 6 else "")
        described = " or ".join(f"{name} ({what})" for name, what in configs.items())
        raise BadCheckpoint(f"{path} holds no model (files: {listed}): expected {described} beside *.safetensors")
    for name in (*configs, RECORD):
        if (p / name).is_file():
            _read_json(p / name)
    if not weights:
        raise BadCheckpoint(f"no *.safetensors weights in {path} (files: {', '.join(files)}); {RESAVE}")
    register_weight_files(weights)
    header = read_headers(weights) if kind == "safetensors" else pickled_headers(weights)
    _check_weights(p, header)


def read_headers(files) -> dict:
    """{tensor name: (dtype string, shape tuple, file name)} from the headers of safetensors `files`; a
    truncated or corrupt file raises BadCheckpoint."""
    from safetensors import safe_open

    out = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as st:
                for k in st.keys():
                    s = st.get_slice(k)
                    out[k] = (s.get_dtype(), tuple(s.get_shape()), f.name)
        except Exception as e:  # SafetensorError (not importable under a stable name) or OSError
            if type(e).__name__ != "SafetensorError" and not isinstance(e, OSError):
                raise
            raise BadCheckpoint(f"{f} is truncated or corrupt ({_first_line(e)}); {RESAVE}") from e
    return out


def _check_weights(p: Path, header: dict) -> None:
    """The directory is claimed by exactly one family, and its weights are the ones that family's config implies."""
    adapter = adapter_for_dir(p)  # UnsupportedModel naming what the directory holds and what glmc reads
    expected = adapter.checkpoint.expected_weights(p, adapter.label)
    if expected is None:
        return  # the family's loader checks its weights strictly
    config = adapter.checkpoint.config_file
    header = {renamed(k, adapter.checkpoint.renames): v for k, v in header.items()}
    prefix = expected.pop(None)
    for name, shape in expected.items():
        key = name if name in header else name.removeprefix(prefix + ".")
        if key not in header:
            raise BadCheckpoint(f"{p} lacks weight {name!r} that {config} implies (transformers would "
                                f"initialise it at random): the checkpoint is incomplete; {RESAVE}")
        dtype, have, file = header[key]
        if dtype not in FLOAT_DTYPES:
            raise BadCheckpoint(f"{p / file}: weight {key!r} is stored as {dtype}; glmc needs floating-point weights "
                                f"({', '.join(FLOAT_DTYPES)}): save the model with float weights")
        if have != shape:
            raise BadCheckpoint(f"{p / file}: weight {key!r} has shape {list(have)} but {config} "
                                f"implies {list(shape)}: the weights and the config do not belong together")


def check_finite(model, path) -> None:
    """Refuse a model with a NaN or infinite parameter, naming the first. Each weight's mapped pages go back to
    the OS once checked: nothing needs them until the model is used."""
    pages = FilePages()
    for name, t in model.named_parameters():
        # a NaN makes both extremes NaN and an infinity one of them: two reductions instead of a boolean copy
        # of every weight (12× faster; 1 s of a 124M alignment)
        ok = t.numel() == 0 or all(bool(torch.isfinite(x)) for x in torch.aminmax(t.detach()))
        pages.release(t)
        if not ok:
            finite = torch.isfinite(t)
            bad = int((~finite).sum())
            kind = "NaN" if bool(torch.isnan(t).any()) else "infinite"
            raise BadCheckpoint(f"{path}: weight {name!r} holds {kind} values ({bad} of {t.numel()} entries); the "
                                "checkpoint is broken (did training diverge?): use another checkpoint")


def check_group(models, paths) -> None:
    """Refuse models that cannot be aligned, interpolated or merged together: every model must be of model 1's
    family (hence task), depth and width-independent sizes (vocabulary, positions, patch, classes); widths may
    differ. Raises IncompatibleModels naming the first difference."""
    adapters = [adapter_for(m) for m in models]
    a, pa = models[0], paths[0]
    arch_a = adapters[0].arch(a)
    sizes_a = _fixed_sizes(adapters[0], a)
    for adapter, m, p in zip(adapters[1:], models[1:], paths[1:]):
        if adapter.family != adapters[0].family:
            raise IncompatibleModels(f"cannot combine a {adapters[0].family} model ({pa}) with a {adapter.family} "
                                     f"model ({p}): glmc aligns models of one family and task")
        arch = adapter.arch(m)
        if arch.n_layer != arch_a.n_layer:
            raise IncompatibleModels(f"models differ in depth ({pa}: {arch_a.n_layer} layers, {p}: {arch.n_layer}); "
                                     "glmc aligns models of the same depth (widths may differ)")
        sizes = _fixed_sizes(adapter, m)
        for role in sorted(set(sizes_a) | set(sizes)):
            if sizes_a.get(role) != sizes.get(role):
                what = ROLE_NAMES.get(role, role)
                raise IncompatibleModels(f"models differ in {what} ({pa}: {_size(sizes_a.get(role))}, {p}: "
                                         f"{_size(sizes.get(role))}); glmc aligns models that differ only in width")


# canonical roles outside the blocks whose leading axes do not depend on the width (the residual axis is last)
ROLE_NAMES = {"embed": "vocabulary size", "pos_embed": "positions (context length or number of patches)",
              "patch.w": "patch size × channels", "head.w": "output size (vocabulary or classes)",
              "cls": "class token", "registers": "register tokens"}


def _fixed_sizes(adapter, model) -> dict:
    return {k: shape[:-1] for k, shape in canonical_shapes(adapter, model).items() if k in ROLE_NAMES}


def _size(shape) -> str:
    if shape is None:
        return "none"
    return str(shape[0]) if len(shape) == 1 else "×".join(map(str, shape))


def _read_json(f: Path):
    try:
        return json.loads(f.read_text())
    except UnicodeDecodeError as e:
        raise BadCheckpoint(f"{f} is not text ({e.reason}); {RESAVE}") from e
    except json.JSONDecodeError as e:
        raise BadCheckpoint(f"{f} is not valid JSON ({e.msg} at line {e.lineno} column {e.colno}): fix the file "
                            "or write it again") from e


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def check_data_fits(ds, model, path) -> None:
    """Refuse data a model cannot be evaluated on: another task, token ids beyond its vocabulary, or another
    number of classes (IncompatibleModels naming both sides)."""
    adapter = adapter_for(model)
    task, sizes = adapter.arch(model).task, _fixed_sizes(adapter, model)
    source = ds.spec.get("source", "?")
    check_data_task(ds.task, source, model, path)
    record = get_task(task)
    if record.reads_text and "embed" in sizes and ds.vocab_size > sizes["embed"][0]:
        raise IncompatibleModels(f"the tokenizer of {source!r} has {ds.vocab_size} tokens but {path} has a vocabulary "
                                 f"of {sizes['embed'][0]}: use the model's own tokenizer (--tokenizer {path})")
    if record.causal and "pos_embed" in sizes and ds.spec.get("context", 0) > sizes["pos_embed"][0]:
        raise IncompatibleModels(f"the data's context is {ds.spec['context']} tokens but {path} has "
                                 f"{sizes['pos_embed'][0]} positions: give a spec with a shorter context")
    if record.classes and "head.w" in sizes and ds.num_classes != sizes["head.w"][0]:
        raise IncompatibleModels(f"{source!r} has {ds.num_classes} classes but {path} outputs "
                                 f"{sizes['head.w'][0]}: give the data it was trained on (--data)")


def data_options_for(model, data) -> dict:
    """Spec options a model decides for a data spec that does not set them: a context no longer than a learned
    position table (text specs default to 128 tokens)."""
    if isinstance(data, dict) and "context" in data:
        return {}
    positions = _fixed_sizes(adapter_for(model), model).get("pos_embed")
    adapter = adapter_for(model)
    if not get_task(adapter.arch(model).task).causal or positions is None or positions[0] >= 128:
        return {}
    return {"context": int(positions[0])}


def check_data_task(data_task: str, source: str, model, path) -> None:
    """Refuse data of a task that models of another task learn (text for an image classifier, images for an LM;
    Task.model_task lets a task's data feed another task's models)."""
    adapter = adapter_for(model)
    task = adapter.arch(model).task
    if get_task(data_task).models != task:
        model_task, given = get_task(task), get_task(data_task)
        raise IncompatibleModels(f"{path} is a {adapter.family} model for {model_task.data_label} "
                                 f"({model_task.model_label}), but the data {source!r} is {given.data_label}: "
                                 "give matching --data")
