"""Where a model in memory came from, so that what glmc writes for it keeps its tokenizer and training record.

`glmc.load_model` remembers the directory of every model it loads (weakly: forgetting the model forgets the
entry). Results derived from such a model are saved with the tokenizer files and the glmc.json record of that
directory, so later commands need no data flags; a model glmc did not load is saved with its weights only.
"""

from __future__ import annotations

import weakref
from pathlib import Path

_SOURCES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def remember(model, directory) -> None:
    _SOURCES[model] = Path(directory)


def source_of(model) -> Path | None:
    """The directory `model` was loaded from by glmc, or None."""
    try:
        return _SOURCES.get(model)
    except TypeError:  # not weak-referenceable: not ours
        return None


def write_like(model, source_dir, target) -> None:
    """Write `model` into the directory `target` (inside an atomic write; see glmc.io.atomic_dir) with the tokenizer
    and the glmc.json record of `source_dir` (when given), marked as derived from it."""
    from glmc.models import read_record, write_model_files

    tokenizer, record = None, None
    if source_dir is not None:
        if (Path(source_dir) / "tokenizer.json").is_file():
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(source_dir))
        record = read_record(source_dir)
        if record is not None:
            record = {**record, "derived_from": str(source_dir)}
    Path(target).mkdir(parents=True, exist_ok=True)
    write_model_files(model, Path(target), record=record, tokenizer=tokenizer)
