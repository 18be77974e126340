"""Options and helpers shared by the commands that evaluate models on data (barrier, align, merge, demo)."""

from __future__ import annotations

import functools
import json
import math

import click

from glmc.cli.flags import flag
from glmc.io import atomic_path
from glmc.options import BarrierOptions


def data_options(f):
    @click.option("--data", default=None, help="Data override (e.g. shakespeare, text:PATH, mnist); default: "
                  "what model A's glmc.json records.")
    @click.option("--tokenizer", default=None, type=click.Path(exists=True, file_okay=False),
                  help="With --data for text: a directory holding the tokenizer to read it with (tokenizer.json, "
                  "as save_pretrained writes it); default: model A's own.")
    @flag(BarrierOptions, "split")
    @flag(BarrierOptions, "batch_size")
    @flag(BarrierOptions, "max_batches")
    @click.option("--max-tokens", default=None, type=click.IntRange(min=1),
                  help="LMs: evaluate on at most this many tokens.")
    @click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:1, …")
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        return f(*args, **kwargs)

    return wrapper


def mode_option(f):
    return flag(BarrierOptions, "mode")(f)


def progress_option(f):
    return flag(BarrierOptions, "progress")(f)


def pick_device(name: str):
    """--device as a torch.device. Under a multi-process launch each process has its own: auto gives the one
    accelerate assigns it (cuda:LOCAL_RANK on GPUs), cuda gives cuda:LOCAL_RANK, and cuda:N is refused."""
    import torch

    from glmc import distributed

    if name == "auto":
        return distributed.device()
    try:
        device = torch.device(name)
    except RuntimeError:
        raise click.BadParameter(f"{name!r} is not a device; use auto, cpu, cuda or cuda:N", param_hint="--device") \
            from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise click.BadParameter("CUDA is not available on this machine; use --device cpu", param_hint="--device")
    if device.type == "cuda" and distributed.launched():
        return _process_gpu(device)
    return device


def _process_gpu(device):
    import torch

    from glmc import distributed

    if device.index is not None:
        raise click.BadParameter(f"under a multi-process launch each process uses its own GPU (cuda:LOCAL_RANK); "
                                 f"use --device cuda or auto, not {device}", param_hint="--device")
    own, count = distributed.local_rank(), torch.cuda.device_count()
    if own >= count:
        raise click.BadParameter(f"process {own} on this machine has no GPU of its own ({count} visible); launch at "
                                 f"most {count} processes per machine", param_hint="--device")
    return torch.device("cuda", own)


def check_out_path(path, option: str, overwrite: bool = True, directory: bool = False, inputs=()) -> None:
    """Refuse an output path early (before any work): one that is, contains or lies inside one of the `inputs`
    (with --overwrite too), one that exists without --overwrite, a directory where a file goes, or one below a
    regular file. Then take the output's lock for the rest of the command (glmc/io.py): a second run on the same
    output is refused while this one runs."""
    from pathlib import Path

    from glmc.io import check_not_input, lock_output

    try:
        check_not_input(path, inputs)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint=option) from None
    p = Path(path)
    if p.exists() and not overwrite:
        raise click.BadParameter(f"{path} exists (pass --overwrite to replace it, or choose another path)",
                                 param_hint=option)
    if p.is_dir() and not directory:
        raise click.BadParameter(f"{path} is a directory; give a file path", param_hint=option)
    if p.exists() and directory and not p.is_dir():
        raise click.BadParameter(f"{path} is a file; give a directory path", param_hint=option)
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise click.BadParameter(f"cannot write {path}: {parent} is a file, not a directory; choose another path",
                                 param_hint=option)
    from glmc import distributed

    ctx = click.get_current_context(silent=True)
    if ctx is not None and distributed.is_main():  # only the main process of a launch writes
        ctx.with_resource(lock_output(path))


class ModelPath(click.ParamType):
    """A model argument: an existing directory (a file is refused), or a hub id ORG/NAME[@REVISION] that names a
    model in the local Hugging Face cache (resolved by resolve_models, which knows --revision)."""

    name = "model"

    def convert(self, value, param, ctx):
        from pathlib import Path

        from glmc.models.hub import looks_like_hub_id

        p = Path(value).expanduser()
        if p.exists():
            if not p.is_dir():
                self.fail(f"{value!r} is a file: give a model directory", param, ctx)
            return value
        if looks_like_hub_id(value):
            return value
        self.fail(f"directory {value!r} does not exist", param, ctx)


MODEL = ModelPath()


def revision_option(f):
    return click.option("--revision", default=None,
                        help="For hub ids (ORG/NAME) in the local Hugging Face cache: the revision, a branch or tag "
                             "name or a commit hash [main; ORG/NAME@REV sets one model's own]. Nothing is "
                             "downloaded.")(f)


def resolve_models(paths, revision=None) -> list[str]:
    """Each model argument as a directory: itself, or its hub id's cached snapshot (glmc/models/hub.py); `revision`
    applies to the hub ids (a --revision with directories only is refused, since it would be ignored)."""
    from pathlib import Path

    from glmc.api.sources import resolve_model_path
    from glmc.errors import BadOption

    local = [Path(p).expanduser().exists() for p in paths]
    if revision is not None and all(local):
        raise BadOption(f"--revision applies to hub ids; {paths[0]} is a directory (give ORG/NAME, or the directory "
                        "of the revision you want)")
    return [str(resolve_model_path(p, None if here else revision)) for p, here in zip(paths, local)]


def load_models(paths, device, compute_dtype="float32"):
    """The models in `paths`, checked (glmc/models/checkpoint.py: files, weights, and that they can be combined), on
    `device`, their weights upcast to `compute_dtype` in place (each remembers the dtype it was stored in, which is
    what its derived models are written in). A bad checkpoint or pair raises a glmc.errors.GlmcError, which the CLI
    prints as one line."""
    from glmc.api import load_model
    from glmc.api.sources import COMPUTE_DTYPES, remember_dtype, torch_dtype, weights_dtype
    from glmc.models.inspect import check_models

    out = [load_model(p) for p in paths]
    if len(out) > 1:
        check_models(out, [str(p) for p in paths])  # what `glmc inspect` reports, first reason only
    compute = torch_dtype(compute_dtype, "--compute-dtype", COMPUTE_DTYPES)
    for m in out:
        remember_dtype(m, weights_dtype(m))
    return [m.to(device=device, dtype=compute).eval() for m in out]


def precision_options(write: bool = True):
    """--compute-dtype (and, for commands that write models, --dtype and --max-shard-size)."""
    from glmc.api.sources import COMPUTE_DTYPES, WRITE_DTYPES

    def decorate(f):
        if write:
            f = max_shard_size_option(f)
            f = click.option("--dtype", "out_dtype", default="auto", show_default=True,
                             type=click.Choice(["auto", *WRITE_DTYPES]),
                             help="dtype of the written weights [auto: each aligned model its input's, a merge "
                                  "model A's]. The rounding's effect is measured and reported.")(f)
        return click.option("--compute-dtype", default="float32", show_default=True,
                            type=click.Choice(list(COMPUTE_DTYPES)),
                            help="Precision of alignment, interpolation and merging (bfloat16/float16 checkpoints "
                                 "are upcast; the function check runs in it, before any rounding).")(f)

    return decorate


SIZE_UNITS = {"": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def _shard_size(ctx, param, value):
    """--max-shard-size in bytes, from an integer and an optional unit (KB, MB, GB, KiB, MiB, GiB)."""
    import re

    if value is None:
        return None
    m = re.fullmatch(r"(\d+)\s*([KMG]I?B)?", value.strip().upper())
    if not m or int(m.group(1)) == 0:
        raise click.BadParameter(f"{value!r} is not a size; give a whole number of bytes or e.g. 500MB, 2GB, 1GiB")
    return int(m.group(1)) * SIZE_UNITS[m.group(2) or ""]


def max_shard_size_option(f):
    return click.option("--max-shard-size", default=None, callback=_shard_size,
                        help="Write Hugging Face weights above this size (e.g. 500MB, 2GB) as shards "
                             "model-0000k-of-0000n.safetensors with an index [5GB].")(f)


def rounding_line(report: dict) -> str | None:
    """The printed line for report["rounding"] (glmc.align / glmc.merge), or None when nothing was rounded."""
    r = report.get("rounding")
    if not r:
        return None
    return (f"written in {r['dtype']}: rounding the weights changes the logits by max |Δlogits| {r['max_dlogits']:.2e} "
            f"(measured on probe inputs; the function check above is on the unrounded {report['dtypes']['compute']} "
            "weights)")


def load_eval_data(model_dir, data=None, tokenizer=None, split="test", batch_size=32, max_batches=None,
                   max_tokens=None, model=None):
    """(data set, materialised batches, info for reports). Batches are built once so every λ and every method
    sees the same ones. With `model` (loaded from `model_dir`), data it cannot be evaluated on is refused."""
    import glmc.data
    from glmc.tasks import task as task_record

    if model is not None and isinstance(data, str):  # a text source for a model that reads text its own way
        from glmc.adapters import adapter_for

        data = adapter_for(model).training.reading(model, data, tokenizer or model_dir) or data
    if model is not None and data is not None:  # before reading the data (or a tokenizer the model lacks)
        from glmc.models.checkpoint import check_data_task

        try:
            task = glmc.data.parse_spec(data)["task"]  # an unknown source is refused here, by name
        except ValueError as e:
            raise click.ClickException(str(e)) from None
        check_data_task(task, data, model, model_dir)
    try:
        if data is None:
            ds = glmc.data.load_for_model(model_dir)
        else:
            from glmc.models.checkpoint import data_options_for

            source = data if isinstance(data, str) else data.get("source", "")
            text = task_record(glmc.data.task_of(source)).reads_text  # read with the model's own tokenizer
            spec_task = data.get("task") if isinstance(data, dict) and "task" in data else glmc.data.task_of(source)
            causal = task_record(str(spec_task)).causal
            fitted = data_options_for(model, data) if model is not None and causal else {}
            ds = glmc.data.load(data, use_tokenizer=tokenizer or (model_dir if text else None),
                                use_preprocessor=None if text else model_dir, **fitted)
    except (FileNotFoundError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    if model is not None:
        from glmc.models.checkpoint import check_data_fits

        check_data_fits(ds, model, model_dir)
    if max_tokens is not None and task_record(ds.task).reads_text:
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


def check_plot_path(path, option: str = "--plot", inputs=()) -> None:
    """A figure path whose suffix matplotlib can write (none: PNG), checked before any work."""
    from pathlib import Path

    check_out_path(path, option, inputs=inputs)
    suffix = Path(path).suffix.lstrip(".").lower()
    if suffix:
        from matplotlib.figure import Figure

        formats = Figure().canvas.get_supported_filetypes()
        if suffix not in formats:
            raise click.BadParameter(f"cannot draw a .{suffix} figure; use one of {', '.join(sorted(formats))}",
                                     param_hint=option)


def parse_methods(text: str, option: str, simplex: bool = False) -> list[str]:
    """Comma-separated alignment method names, each one glmc implements (for 3+ models: a simplex method)."""
    from glmc.methods import names

    methods = [m.strip() for m in text.split(",") if m.strip()]
    known = names(simplex=True) if simplex else names()
    bad = [m for m in methods if m not in known]
    if not methods or bad:
        what = f"unknown method {bad[0]!r}" if bad else "no method given"
        kind = "simplex barriers (3+ models) support" if simplex else "choose from"
        raise click.BadParameter(f"{what}; {kind} {', '.join(known)}", param_hint=option)
    return methods
