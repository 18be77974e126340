"""Offline data sets for glmc: text corpora with tokenizers (task "lm"; "mlm" for encoders, glmc/data/mlm.py) and
image sets (task "cls").

    ds = glmc.data.load("shakespeare")                      # or a spec dict, e.g. record["data"]
    ds = glmc.data.load(record["data"], use_tokenizer=model_dir)  # reuse the tokenizer saved with a model
    ds = glmc.data.load("shakespeare", tokenizer="bpe:512", context=256)  # options fill in the spec
    for batch in ds.batches("test", 64):                     # dicts of tensors, ready for the model
        ...

Every data set has ``.task`` ('lm' or 'cls'), ``.spec`` (a JSON-serialisable dict; ``load(ds.spec)``
rebuilds the same data and batches), ``.batches(split, batch_size, *, max_batches=None, seed=None,
shuffle=None)``, ``.num_batches(split, batch_size)`` and ``.describe()``. See spec.py for the spec format,
lm.py and vision.py for what the batches hold.
"""

import json
from pathlib import Path

from glmc.plugins import resolve
from glmc.tasks import task

from . import tables
from .lm import LMDataset
from .sources import source_of
from .spec import parse_spec, task_of
from .vision import ImageDataset

__all__ = ["load", "load_for_model", "parse_spec", "task_of", "training_stream", "LMDataset", "ImageDataset"]

_CACHE: dict = {}


def load(spec, *, use_tokenizer=None, use_preprocessor=None, **options):
    """A data set from a spec dict or a source string ('mnist', 'text:PATH', ...).

    options override or fill in spec entries (tokenizer, context, augment, ...; see spec.parse_spec).
    use_tokenizer: for LM data, an already loaded tokenizer or a directory holding one (e.g. the model's),
    used instead of rebuilding the tokenizer the spec names. Results are cached per process, keyed by the
    spec and the tokenizer directory, so repeated loads are free.
    use_preprocessor: for image tables, a model directory whose preprocessor_config.json (when it has
    one) decides the image size, channels and normalisation the spec does not already fix.
    """
    full = parse_spec(spec, **options)
    record = task(full["task"])
    if use_preprocessor is not None and not record.reads_text and source_of(full["source"]).preprocessed:
        full = {**tables.preprocessor(use_preprocessor), **full}
    cacheable = use_tokenizer is None or isinstance(use_tokenizer, (str, Path))
    key = (json.dumps(full, sort_keys=True), str(use_tokenizer)) if cacheable else None
    if key in _CACHE:
        return _CACHE[key]
    if use_tokenizer is not None and not record.reads_text:
        raise ValueError(f"a tokenizer was given for {record.data_label}")
    ds = resolve(record.load)(full, use_tokenizer)
    if key is not None:  # under the completed spec too, which is what later callers pass back
        _CACHE[key] = _CACHE[(json.dumps(ds.spec, sort_keys=True), key[1])] = ds
    return ds


def training_stream(ds, batch_size: int, seed: int):
    """An endless stream of training batches, epoch after epoch, epoch e in the order seeded by
    seed·1_000_003 + e: one rule for training endpoints and for learned matching's training."""
    epoch = 0
    while True:
        yield from ds.batches("train", batch_size, seed=seed * 1_000_003 + epoch, shuffle=True)
        epoch += 1


def load_for_model(model_dir, **options):
    """The data set a glmc-trained model was trained on, from its glmc.json, with its saved tokenizer."""
    record_path = Path(model_dir) / "glmc.json"
    if not record_path.is_file():
        raise FileNotFoundError(f"{model_dir} has no glmc.json; give the data explicitly (e.g. --data)")
    record = json.loads(record_path.read_text())
    if "data" not in record:
        raise ValueError(f"{record_path} has no 'data' entry")
    given = record["data"].get("task")
    tok = model_dir if given and task(given).reads_text else None
    return load(record["data"], use_tokenizer=tok, **options)
