"""What `data=` may be in the Python API, turned into a glmc data set for a given model.

- None: the data set recorded in the glmc.json beside the model (models loaded with `glmc.load_model` from a
  directory `glmc train` wrote), with its saved tokenizer;
- a data spec: a string ("shakespeare", "text:PATH", "mnist", "fashion-mnist", "digits", "jsonl:PATH[:FIELD]",
  "parquet:PATH[:FIELD]", "hf-disk:PATH[:FIELD]", "hf:NAME[:CONFIG][:SPLIT]", image tables with
  "…:image=COL,label=COL", …) or a spec dict (glmc/data/spec.py); text is tokenized with the model's saved tokenizer
  when glmc loaded it, image tables go through its preprocessor_config.json when it has one;
- a glmc data set (what `glmc.data.load` returns);
- a DataLoader or any iterable of batches, or a dict of them per split (glmc/data/iterable.py).
"""

from __future__ import annotations

import glmc.data
from glmc.adapters import adapter_for
from glmc.api.sources import source_of
from glmc.data.iterable import IterableData, is_batch_source
from glmc.errors import BadData
from glmc.models.checkpoint import check_data_fits, check_data_task, data_options_for
from glmc.tasks import task as task_record


def resolve_data(data, model, required: str | None = None):
    """The glmc data set `data` describes, for `model`; None when data is None and nothing is recorded. With
    `required` (what needs it, e.g. "learned matching"), a missing data set raises BadData naming the fix."""
    source = source_of(model)
    task = adapter_for(model).arch(model).task
    if data is None:
        if source is not None and (source / "glmc.json").is_file():
            try:
                return glmc.data.load_for_model(source)
            except (FileNotFoundError, ValueError):
                pass
        if required:
            raise BadData(f"{required} needs data: pass data= (a spec such as 'shakespeare' or 'mnist', a DataLoader "
                          "or an iterable of batches)")
        return None
    if hasattr(data, "batches") and hasattr(data, "task"):
        return data
    if isinstance(data, str) and source is not None:  # a text source read the model's own way (an encoder's blocks)
        try:
            data = adapter_for(model).training.reading(model, data, source) or data
        except ValueError as e:
            raise BadData(str(e)) from None
    if isinstance(data, (str, dict)) and not is_batch_source(data):
        spec_task = glmc.data.parse_spec(data)["task"]
        where = str(source) if source is not None else "the model"
        check_data_task(spec_task, data if isinstance(data, str) else str(data.get("source")), model, where)
        reads_text = task_record(spec_task).reads_text
        use_tokenizer = source if reads_text and source is not None and _has_tokenizer(source) else None
        fitted = data_options_for(model, data) if task_record(spec_task).causal else {}
        ds = glmc.data.load(data, use_tokenizer=use_tokenizer, use_preprocessor=None if reads_text else source,
                            **fitted)
        check_data_fits(ds, model, where)
        return ds
    if is_batch_source(data):
        return IterableData(data, task)
    raise BadData(f"cannot use a {type(data).__name__} as data; give a spec string, a DataLoader or an iterable "
                  "of batches")


def _has_tokenizer(directory) -> bool:
    return any((directory / f).is_file() for f in ("tokenizer.json", "vocab.json", "tokenizer_config.json"))


def evaluation_batches(ds, model, split: str = "test", batch_size: int = 32, max_batches: int | None = None,
                       batches=None) -> list:
    """The batches a path is evaluated on, materialised once so every λ sees the same ones: `batches` (the
    caller's own, any form glmc/data/iterable.py reads) or the `split` of the data set."""
    if batches is not None:
        out = list(IterableData(batches, adapter_for(model).arch(model).task).batches("test"))
    else:
        if ds is None:
            raise BadData("a barrier is measured on data: pass data= (a spec such as 'shakespeare' or 'mnist', a "
                          "DataLoader or an iterable of batches)")
        out = list(ds.batches(split, batch_size, max_batches=max_batches, shuffle=False))
    if not out:
        raise BadData(f"the {split} split has no batches")
    return out
