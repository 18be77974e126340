"""Options and helpers shared by the commands that evaluate models on data (barrier, align, merge, demo)."""

from __future__ import annotations

import functools
import json
import math

import click

from glmc.io import atomic_path


def data_options(f):
    @click.option("--data", default=None, help="Data override (e.g. shakespeare, text:PATH, mnist); default: "
                  "what model A's glmc.json records.")
    @click.option("--tokenizer", default=None, help="With --data for text: tokenizer directory or spec.")
    @click.option("--split", default="test", show_default=True, type=click.Choice(["train", "val", "test"]))
    @click.option("--batch-size", default=32, show_default=True)
    @click.option("--max-batches", default=None, type=int, help="Evaluate on at most this many batches.")
    @click.option("--max-tokens", default=None, type=int, help="LMs: evaluate on at most this many tokens.")
    @click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:1, …")
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        return f(*args, **kwargs)

    return wrapper


def mode_option(f):
    return click.option("--mode", default="native", show_default=True, type=click.Choice(["native", "circuit"]),
                        help="native: standard models of the original size; circuit: the paper's circuit form "
                             "(heads as bias-augmented QK/OV circuits, interpolated whole).")(f)


def pick_device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_models(paths, device):
    from glmc.models import load_model

    out = []
    for p in paths:
        try:
            model, _ = load_model(p)
        except (FileNotFoundError, ValueError) as e:
            raise click.ClickException(str(e))
        out.append(model.to(device).eval())
    return out


def load_eval_data(model_dir, data=None, tokenizer=None, split="test", batch_size=32, max_batches=None,
                   max_tokens=None):
    """(data set, materialised batches, info for reports). Batches are built once so every λ and every method
    sees the same ones."""
    import glmc.data

    try:
        if data is None:
            ds = glmc.data.load_for_model(model_dir)
        else:
            ds = glmc.data.load(data, use_tokenizer=tokenizer or (model_dir if glmc.data.task_of(data) == "lm"
                                                                 else None))
    except (FileNotFoundError, ValueError) as e:
        raise click.ClickException(str(e))
    if max_tokens is not None and ds.task == "lm":
        per_batch = batch_size * ds.spec["context"]
        max_batches = min(max_batches or math.inf, max(1, math.ceil(max_tokens / per_batch)))
    batches = list(ds.batches(split, batch_size, max_batches=max_batches, shuffle=False))
    if not batches:
        raise click.ClickException(f"the {split} split has no batches")
    info = {"data": ds.spec, "split": split, "batch_size": batch_size, "n_batches": len(batches)}
    return ds, batches, info


def write_json(path, obj) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")


def save_like(model, source_dir, target) -> None:
    """Save `model` into `target` (not atomic by itself: call inside glmc.io.atomic_dir) with the tokenizer and
    the glmc.json record of the checkpoint it came from, so later commands need no data flags."""
    from pathlib import Path

    from glmc.models import read_record, write_model_files

    tokenizer = None
    if (Path(source_dir) / "tokenizer.json").is_file():
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(source_dir)
    record = read_record(source_dir)
    if record is not None:
        record = {**record, "derived_from": str(source_dir)}
    Path(target).mkdir(parents=True, exist_ok=True)
    write_model_files(model.cpu(), Path(target), record=record, tokenizer=tokenizer)
