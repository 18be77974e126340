"""Where a model in memory came from, so that what glmc writes for it keeps its tokenizer and training record.

`glmc.load_model` remembers the directory of every model it loads (weakly: forgetting the model forgets the
entry). Results derived from such a model are saved with the tokenizer files and the glmc.json record of that
directory, so later commands need no data flags; a model glmc did not load is saved with its weights only.
"""

from __future__ import annotations

import copy
import weakref
from pathlib import Path

import torch

from glmc.errors import BadOption
from glmc.memory import release_parked
from glmc.models import read_record, write_model_files
from glmc.models.hub import snapshot

_SOURCES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_DTYPES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> the dtype its weights were stored in
COMPUTE_DTYPES = ("float32", "float64")
WRITE_DTYPES = ("float32", "bfloat16", "float16", "float64")


def remember(model, directory) -> None:
    _SOURCES[model] = Path(directory)


def source_of(model) -> Path | None:
    """The directory `model` was loaded from by glmc, or None."""
    try:
        return _SOURCES.get(model)
    except TypeError:  # not weak-referenceable: not ours
        return None


def weights_dtype(model):
    """The dtype of `model`'s floating-point parameters (the first one's)."""
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def stored_dtype(model):
    """The dtype the weights of `model` (or of the model it was computed from) were stored in: what glmc writes
    it back in by default."""
    try:
        remembered = _DTYPES.get(model)
    except TypeError:
        remembered = None
    return remembered if remembered is not None else weights_dtype(model)


def remember_dtype(model, dtype) -> None:
    _DTYPES[model] = dtype


def torch_dtype(name, option: str = "dtype", choices=WRITE_DTYPES):
    """A torch dtype from its name ("bfloat16") or itself; None stays None. BadOption for anything else."""

    if name is None or isinstance(name, torch.dtype):
        return name
    if name not in choices:
        raise BadOption(f"unknown {option} {name!r}; choose from {', '.join(choices)}")
    return getattr(torch, name)


def in_dtype(model, dtype):
    """`model` itself when its floating-point weights are all `dtype`, else a copy cast to `dtype` that keeps
    the original's directory and stored dtype (the caller's model is never modified)."""
    if all(p.dtype == dtype for p in model.parameters() if p.is_floating_point()):
        return model
    out = copy.deepcopy(model).to(dtype)
    remember_dtype(out, stored_dtype(model))
    if source_of(model) is not None:
        remember(out, source_of(model))
    return out


def cast_copy(model, dtype):
    """A copy of `model` with its floating-point weights rounded to `dtype` (the model itself if they are)."""
    if all(p.dtype == dtype for p in model.parameters() if p.is_floating_point()):
        return model
    return copy.deepcopy(model).to(dtype)


def write_like(model, source_dir, target, dtype=None, max_shard_size=None) -> None:
    """Write `model` into the directory `target` (inside an atomic write; see glmc.io.atomic_dir) with the tokenizer
    and the glmc.json record of `source_dir` (when given), marked as derived from it; its weights rounded to
    `dtype` when given (the model in memory is left as it is)."""
    if dtype is not None:
        model = cast_copy(model, torch_dtype(dtype))

    tokenizer, record = None, None
    if source_dir is not None:
        if (Path(source_dir) / "tokenizer.json").is_file():
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(source_dir))
        record = read_record(source_dir)
        if record is not None:
            record = {**record, "derived_from": str(source_dir)}
    Path(target).mkdir(parents=True, exist_ok=True)
    write_model_files(model, Path(target), record=record, tokenizer=tokenizer, max_shard_size=max_shard_size)
    release_parked(model.parameters())  # a parked model's pages, read by the write, go back (glmc/memory.py)


def resolve_model_path(path_or_id, revision=None, cache_dir=None) -> Path:
    """The directory a model argument names: an existing path as it is, or a hub id's snapshot in the local cache
    (glmc/models/hub.py). Raises BadCheckpoint / BadOption naming the fix."""
    path = Path(str(path_or_id)).expanduser()
    if path.exists():
        if revision is not None:
            raise BadOption(f"--revision applies to hub ids; {path_or_id} is a directory (give ORG/NAME, or the "
                            "directory of the revision you want)")
        return path
    return snapshot(str(path_or_id), revision, cache_dir)
