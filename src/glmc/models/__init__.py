"""Build, save and load models of every family an adapter handles (glmc/adapters), by family name or directory.

On-disk format of a model directory:
- the family's own files, written and read by its adapter: for Hugging Face families exactly what
  ``save_pretrained`` writes (``config.json`` + ``model.safetensors``), so ``from_pretrained(dir)`` works without
  glmc; for timm ``model.safetensors`` + ``timm_config.json`` (see glmc/adapters/timm_config.py);
- optional, every family: ``glmc.json``, the training record written by ``glmc train`` (data spec,
  tokenizer, model and training configuration, metrics; see glmc/training/train.py), and tokenizer files for LMs.

Loading never unpickles: weights are read from safetensors only. Saving is atomic: everything is written into
a temporary directory beside the target and renamed into place.
"""

import json
from pathlib import Path

from glmc.adapters import FAMILIES, adapter_for, adapter_for_dir, adapter_named
from glmc.adapters.common import DEFAULT_MAX_SHARD_SIZE, MAX_SHARD_SIZE

# kept for callers that built or inspected timm models through glmc.models
from glmc.adapters.timm_config import timm_from_kwargs as _timm_from_kwargs  # noqa: F401
from glmc.adapters.timm_config import timm_kwargs
from glmc.io import atomic_dir

RECORD = "glmc.json"


def build_model(family: str, **shape):
    """A freshly initialised `family` model (uses the global torch RNG: seed it first); `shape` holds the
    keywords of that adapter's build() (glmc/adapters), as glmc.json's "model" records them."""
    return adapter_named(family).build(**shape)


def family_of(model) -> str:
    return adapter_for(model, check=False).family


def task_of_model(model) -> str:
    return adapter_for(model, check=False).task


def save_model(model, path, record=None, tokenizer=None, overwrite: bool = True):
    """Write `model` (+ glmc.json `record`, + `tokenizer`) to directory `path`, atomically."""
    with atomic_dir(path, overwrite=overwrite) as tmp:
        write_model_files(model, tmp, record, tokenizer)
    return Path(path)


def write_model_files(model, directory: Path, record=None, tokenizer=None, max_shard_size=None) -> None:
    """The files of a model directory, written into an existing (temporary) directory; Hugging Face weights above
    `max_shard_size` (bytes, or "500MB", "5GB"; None: DEFAULT_MAX_SHARD_SIZE) as shards with an index."""
    token = MAX_SHARD_SIZE.set(max_shard_size) if max_shard_size is not None else None
    try:
        adapter_for(model, check=False).checkpoint.save(model, Path(directory))
    finally:
        if token is not None:
            MAX_SHARD_SIZE.reset(token)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(directory))
    if record is not None:
        (Path(directory) / RECORD).write_text(json.dumps(record, indent=2, sort_keys=False) + "\n")


def load_model(path):
    """(model in eval mode, glmc.json record or None) from a model directory; see the module docstring."""
    adapter = adapter_for_dir(path)
    record = read_record(path)
    return adapter.checkpoint.load(Path(path)).eval(), record


def read_record(path):
    f = Path(path) / RECORD
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{f} is not valid JSON: {e}") from None


__all__ = ["FAMILIES", "RECORD", "DEFAULT_MAX_SHARD_SIZE", "build_model",
           "family_of", "task_of_model", "save_model", "write_model_files",
           "load_model", "read_record", "timm_kwargs"]
