"""The API's side of checkpoints as people hold them (docs/checkpoints.md): model arguments that are hub ids in the
local cache, `glmc.convert` (pytorch_model.bin → safetensors) and `glmc.inspect` (what a checkpoint is, and whether
checkpoints can be aligned)."""

from __future__ import annotations

import shutil
from pathlib import Path

from glmc.api.functions import load_model
from glmc.api.sources import cast_copy, resolve_model_path, source_of, stored_dtype, torch_dtype
from glmc.io import atomic_dir
from glmc.models import write_model_files
from glmc.models.inspect import describe, incompatibility

# files of a model directory that are weights (rewritten by convert) rather than tokenizer, config or records
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".safetensors.index.json", ".bin.index.json")


def convert(path, out, dtype=None, max_shard_size=None, overwrite: bool = False, revision=None) -> Path:
    """Rewrite a model directory as safetensors: what `save_pretrained` writes (tensors that share storage, such as
    a tied head, are written once), plus the directory's other files (tokenizer, glmc.json, generation and
    preprocessor configs) copied as they are. Reads pytorch_model.bin (single or sharded) through
    torch.load(weights_only=True) only.

    Args:
        path: a model directory, or a hub id in the local Hugging Face cache (see `load_model`).
        out: the new directory (written atomically; never the input, inside it, or holding it).
        dtype: the weights' dtype on disk (None: as stored).
        max_shard_size: shards with an index above this size (None: glmc's default, 5GB).
        overwrite: replace `out` if it exists.
        revision: for a hub id, the cached revision (see `load_model`).

    Returns:
        The output directory.
    """
    source = resolve_model_path(path, revision)
    model = load_model(source)
    with atomic_dir(out, overwrite=overwrite, inputs=[source]) as tmp:
        write_model_files(model if dtype is None else cast_copy(model, torch_dtype(dtype)), tmp,
                          max_shard_size=max_shard_size)
        for f in sorted(Path(source).iterdir()):
            if f.is_file() and not f.name.endswith(WEIGHT_SUFFIXES) and not (tmp / f.name).exists():
                shutil.copyfile(f, tmp / f.name)
    return Path(out)


def inspect(*models, revision=None, cache_dir=None) -> dict:
    """What each model is, and whether they can be aligned, without doing any work (`glmc inspect`).

    Args:
        *models: model directories, hub ids in the local cache (see `load_model`), or models glmc loaded.
        revision, cache_dir: for hub ids (see `load_model`).

    Returns:
        {"models": [per model: path, family, class, task, sizes (layers, d_model, heads, d_head, mlp, vocabulary /
        outputs, positions, …), parameters, dtype (as stored), tied_head, weights (format, files, sharded), tokenizer
        (sha256 fingerprint of what decides the token ids, or None), groups (role -> kind, size, batch,
        per_layer), refused (role -> why glmc does not use that group for this model)], "compatible": bool (two or
        more models), "reason": None or the first reason's code (family, depth, vocabulary, positions, patch,
        classes, heads, width, groups, tokenizer), "message": its one-line explanation}.
    """
    loaded, paths = [], []
    for m in models:
        if isinstance(m, (str, Path)):
            path = resolve_model_path(m, revision, cache_dir)
            m = load_model(path)
        loaded.append(m)
        paths.append(source_of(m))
    out: dict = {"schema": "glmc.inspect/1",
                 "models": [describe(m, p, stored_dtype(m)) for m, p in zip(loaded, paths)]}
    if len(loaded) > 1:
        found = incompatibility(loaded, [str(p) if p else f"model {i + 1}" for i, p in enumerate(paths)])
        out.update({"compatible": found is None, "reason": found and found[0], "message": found and found[1]})
    return out
