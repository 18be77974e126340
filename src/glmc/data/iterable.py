"""The caller's own batches (a torch DataLoader, a list, any re-iterable) as a glmc data set.

Each item becomes a glmc batch dict:
  language models   a LongTensor of token ids [B, T+1] (inputs and next-token targets are its shifts); a dict with
                    ``input_ids`` (and optionally ``labels``, Hugging Face style: shifted here, -100 ignored) or
                    with ``input_ids`` and already-shifted ``targets``; or an ``(input_ids, targets)`` pair
  masked LMs        a LongTensor of token ids [B, T] (every token a target), or a dict with ``input_ids`` and
                    optionally ``attention_mask``, ``token_type_ids`` and ``masked_targets`` (or HF-style ``labels``:
                    -100 where nothing is predicted)
  classifiers       an ``(images, labels)`` pair (torchvision style) or a dict with ``pixel_values`` and ``labels``

A single iterable serves every split; a dict ``{"train": …, "val": …, "test": …}`` gives each split its own
(a missing split falls back to "train", then to any split given). The batch size is the iterable's own: the
``batch_size`` that glmc's methods pass is ignored, and so is ``shuffle`` (a DataLoader shuffles itself).
A one-shot iterator (a generator) is read once into memory, since training passes over the data repeatedly.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping

import torch

from glmc.errors import BadData

SPLITS = ("train", "val", "test")


def is_batch_source(data) -> bool:
    """True for what `IterableData` accepts: an iterable of batches, or a dict of them per split."""
    if isinstance(data, (str, bytes, torch.Tensor)) or hasattr(data, "num_batches"):
        return False
    if isinstance(data, Mapping):
        return bool(data) and set(data) <= set(SPLITS)
    return isinstance(data, Iterable)


class IterableData:
    """A glmc data set (``task``, ``spec``, ``batches``, ``num_batches``, ``describe``) over the caller's batches."""

    def __init__(self, data, task: str):
        if task not in ("lm", "mlm", "cls"):
            raise ValueError(f"task must be 'lm', 'mlm' or 'cls', got {task!r}")
        splits = dict(data) if isinstance(data, Mapping) else {"train": data}
        unknown = sorted(set(splits) - set(SPLITS))
        if unknown:
            raise BadData(f"unknown split(s) {', '.join(unknown)} in the data dict; use train, val, test")
        # generators cannot be replayed: keep their batches
        self.splits = {k: list(v) if isinstance(v, Iterator) else v for k, v in splits.items()}
        self.task = task
        self.spec = {"task": task, "source": "batches", "splits": sorted(self.splits)}

    def _source(self, split: str):
        if split in self.splits:
            return self.splits[split]
        return self.splits.get("train", next(iter(self.splits.values())))

    def batches(self, split: str, batch_size: int | None = None, *, max_batches=None, seed=None, shuffle=None):
        count = 0
        for item in itertools.islice(self._source(split), max_batches):
            count += 1
            yield as_batch(item, self.task)
        if count == 0:
            raise BadData(f"the {split} batches are empty; give an iterable that yields batches")

    def num_batches(self, split: str, batch_size: int | None = None, *, shuffle=None) -> int:
        source = self._source(split)
        try:
            return len(source)
        except TypeError:
            return sum(1 for _ in source)

    def describe(self) -> str:
        return f"caller's batches ({self.task}; splits: {', '.join(sorted(self.splits))})"


def as_batch(item, task: str) -> dict:
    """One item of the caller's iterable as a glmc batch dict (see the module docstring)."""
    if task == "lm":
        return _lm_batch(item)
    if task == "mlm":
        return _mlm_batch(item)
    if isinstance(item, Mapping) and "pixel_values" in item and "labels" in item:
        return {"pixel_values": item["pixel_values"], "labels": item["labels"]}
    if isinstance(item, (tuple, list)) and len(item) == 2:
        return {"pixel_values": item[0], "labels": item[1]}
    raise BadData(f"cannot read an image batch from a {type(item).__name__}; yield (images, labels) pairs "
                          "or dicts with pixel_values and labels")


def _lm_batch(item) -> dict:
    if isinstance(item, torch.Tensor):
        return _shifted(item, item)
    if isinstance(item, Mapping) and "input_ids" in item:
        if "targets" in item:
            return {"input_ids": item["input_ids"], "targets": item["targets"]}
        return _shifted(item["input_ids"], item.get("labels", item["input_ids"]))
    if isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(x, torch.Tensor) for x in item):
        return {"input_ids": item[0], "targets": item[1]}
    raise BadData(f"cannot read a token batch from a {type(item).__name__}; yield LongTensors of token ids "
                          "[batch, length], dicts with input_ids (and labels), or (input_ids, targets) pairs")


def _mlm_batch(item) -> dict:
    if isinstance(item, torch.Tensor) and item.dim() == 2:
        return {"input_ids": item.long(), "masked_targets": item.long()}
    if isinstance(item, Mapping) and "input_ids" in item:
        out = {k: item[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in item}
        out["masked_targets"] = item.get("masked_targets", item.get("labels", item["input_ids"]))
        return out
    raise BadData(f"cannot read a masked-LM batch from a {type(item).__name__}; yield LongTensors of token ids "
                  "[batch, length] or dicts with input_ids (and attention_mask, token_type_ids, labels)")


def _shifted(ids: torch.Tensor, labels: torch.Tensor) -> dict:
    if ids.dim() != 2 or ids.shape[1] < 2 or ids.dtype not in (torch.int64, torch.int32):
        raise BadData(f"token batches must be integer tensors [batch, length ≥ 2], got {tuple(ids.shape)} "
                              f"{ids.dtype}")
    return {"input_ids": ids[:, :-1].long(), "targets": labels[:, 1:].long()}
