"""Data specs: the small JSON dicts that say which data set a model was trained on.

A spec is all that is needed to rebuild the same batches later (``glmc.data.load(spec)``); ``glmc train``
stores the completed spec (with sizes, checksums and normalisation filled in) in the model's glmc.json.

Language modelling::

    {"task": "lm", "source": "shakespeare" | "python-stdlib" | "text:/abs/path.txt" | a table (see below),
     "tokenizer": "char" | "gpt2" | "bpe:N", "context": 128, "split": {"train": 0.9, "val": 0.05, "test": 0.05}}

Masked language modelling (an encoder's task; glmc/data/mlm.py)::

    {"task": "mlm", "source": <a text source>, "tokenizer": "wordpiece:N" | "bpe:N" | "pretrained:DIR",
     "context": 64 (block length, special tokens included), "style": "bert" | "roberta", "split": {...}}

Image classification::

    {"task": "cls", "source": "mnist" | "fashion-mnist[:DIR]" | "digits" | "cifar10:DIR" | "cifar100:DIR"
     | "folder:DIR", "augment": "none" | "crop-flip", "labels": "fine" | "coarse" (cifar100 only),
     "image_size": null | int (folder and tables: resize to this square size)}

Tables (glmc/data/tables.py): "jsonl:PATH[:FIELD]", "parquet:PATH[:FIELD]", "hf-disk:PATH[:FIELD]" and
"hf:NAME[:CONFIG][:SPLIT]" are text (task "lm"); with a last part "image=COL,label=COL" they are image sets (task
"cls"). Their completed spec records "split_rule": "own", "val-from-train" or "90/5/5".
"""


from glmc.plugins import resolve
from glmc.tasks import task

from .mlm import STYLES
from .mlm import check_kind as check_mlm_kind
from .sources import absolute, absolute_path, source_of, sources
from .text import DEFAULT_SPLIT
from .tokenizer import check_kind

AUGMENTS = ("none", "crop-flip")


def source_kind(source: str) -> str:
    """The kind of a source string (its prefix: 'shakespeare', 'text', 'cifar10', 'jsonl', …), checked against
    the registered data sources (glmc/data/sources.py)."""
    return source_of(source).kind


def task_of(source: str) -> str:
    return source_of(source).task_of(source)


def parse_spec(data, **options) -> dict:
    """A full spec from a string like 'shakespeare' or 'cifar10:/data/cifar' (or a partial dict).

    options (None = default): tokenizer, context, split (LM); augment, labels, image_size (images)."""
    spec = dict(data) if isinstance(data, dict) else {"source": data}
    spec.update({k: v for k, v in options.items() if v is not None})
    if "source" not in spec:
        raise ValueError(f"data spec has no 'source': {spec}")
    spec["source"] = absolute(spec["source"])
    # the source's task, unless the spec names another that reads it (masked-LM text: only an explicit spec asks)
    spec["task"] = spec.get("task") or task_of(spec["source"])
    return resolve(task(spec["task"]).complete)(spec)


def complete_mlm(spec: dict) -> dict:
    if task_of(spec["source"]) != "lm":
        raise ValueError(f"masked-LM data needs a text source, got {spec['source']!r}")
    unknown = set(spec) - {"task", "source", "tokenizer", "context", "split", "style", "text_sha256", "n_chars",
                           "n_tokens"}
    if unknown:
        raise ValueError(f"options {sorted(unknown)} do not apply to masked-LM data {spec['source']!r}")
    spec.setdefault("style", "bert")
    if spec["style"] not in STYLES:
        raise ValueError(f"masked-LM style must be one of {STYLES}, got {spec['style']!r}")
    spec.setdefault("tokenizer", "wordpiece:2000" if spec["style"] == "bert" else "bpe:2000")
    spec["tokenizer"] = check_mlm_kind(spec["tokenizer"])
    if spec["tokenizer"].startswith("pretrained:"):
        spec["tokenizer"] = absolute_path(spec["tokenizer"])
    spec["context"] = int(spec.get("context", 64))
    if spec["context"] < 3:
        raise ValueError(f"a masked-LM block holds two special tokens and at least one more: context >= 3, got "
                         f"{spec['context']}")
    spec.setdefault("split", dict(DEFAULT_SPLIT))
    return spec


def complete_lm(spec: dict) -> dict:
    if task_of(spec["source"]) != "lm":
        raise ValueError(f"language-model data needs a text source, got {spec['source']!r}")
    unknown = set(spec) - {"task", "source", "tokenizer", "context", "split", "text_sha256", "n_chars", "n_tokens",
                           "split_rule"}
    if unknown:
        raise ValueError(f"options {sorted(unknown)} do not apply to text data {spec['source']!r}")
    spec.setdefault("tokenizer", "char")
    spec["tokenizer"] = check_kind(spec["tokenizer"])
    if spec["tokenizer"].startswith("pretrained:"):
        spec["tokenizer"] = absolute_path(spec["tokenizer"])
    spec["context"] = int(spec.get("context", 128))
    if spec["context"] < 1:
        raise ValueError(f"context must be >= 1, got {spec['context']}")
    spec.setdefault("split", dict(DEFAULT_SPLIT))
    return spec


def complete_cls(spec: dict) -> dict:
    if task_of(spec["source"]) != "cls":
        raise ValueError(f"image-classification data needs an image source, got {spec['source']!r}")
    record = source_of(spec["source"])
    unknown = set(spec) - {"task", "source", "augment", "labels", "image_size", "normalize", "val",
                           "n_images", "num_classes", "channels", "split_rule"}
    if unknown:
        raise ValueError(f"options {sorted(unknown)} do not apply to image data {spec['source']!r}")
    spec.setdefault("augment", record.augment)
    if spec["augment"] not in AUGMENTS:
        raise ValueError(f"augment must be one of {AUGMENTS}, got {spec['augment']!r}")
    if "labels" in record.options:
        spec.setdefault("labels", "fine")
        if spec["labels"] not in ("fine", "coarse"):
            raise ValueError(f"{record.kind} labels must be 'fine' or 'coarse', got {spec['labels']!r}")
    for key in ("labels", "image_size"):
        if key in spec and key not in record.options:
            takes = ", ".join(r.form for r in sources().values() if key in r.options)
            raise ValueError(f"'{key}' only applies to {takes}, not {spec['source']!r}")
    return spec
