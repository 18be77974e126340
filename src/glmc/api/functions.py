"""The Python API: load, align, measure barriers, merge and verify models held in memory.

The CLI (glmc/cli) is a thin layer over these functions; they take and return native models (Hugging Face or
timm modules) and never move or modify their inputs.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from pathlib import Path

import torch

from glmc.adapters import adapter_for
from glmc.api.data import evaluation_batches, resolve_data
from glmc.api.results import Alignment, Curve, Merge, Simplex
from glmc.api.sources import (
    COMPUTE_DTYPES,
    cast_copy,
    in_dtype,
    remember,
    remember_dtype,
    resolve_model_path,
    source_of,
    stored_dtype,
    torch_dtype,
    weights_dtype,
    write_like,
)
from glmc.api.transform import Transform
from glmc.errors import BadCheckpoint, BadOption  # noqa: F401  (BadCheckpoint: named by callers)
from glmc.invariance import verify_model
from glmc.io import atomic_dir
from glmc.matching import align as match
from glmc.matching import method_options
from glmc.matching.common import max_logit_change
from glmc.methods import BUILTIN, methods_doc
from glmc.methods import method as method_record
from glmc.methods import names as method_names
from glmc.models.checkpoint import load_checked
from glmc.models.evaluate import evaluate as run
from glmc.models.inspect import check_models
from glmc.options import RENAMED, BarrierOptions, MergeOptions, Options, WeightOptions
from glmc.paths.barrier import path_curve
from glmc.paths.interpolate import eval_dtype
from glmc.paths.simplex import simplex_surface
from glmc.provenance import full_options, provenance
from glmc.tasks import task as get_task
from glmc.view.circuit import CircuitModel, circuit_model


def load_model(path_or_id, device=None, cache_dir=None, revision=None):
    """Load a model glmc can align, in eval mode, in the dtype its weights are stored in.

    Args:
        path_or_id: a model directory (Hugging Face `save_pretrained` output — single or sharded safetensors, or
            pytorch_model.bin read through torch.load(weights_only=True) —, a timm directory, or what `glmc train` /
            `glmc align` wrote; a cache snapshot folder of symlinks works as a plain path), or a Hugging Face hub id
            ("ORG/NAME", "ORG/NAME@REVISION") already in the local HF cache (glmc never downloads).
        device: where to put the model ("cpu", "cuda", "cuda:1", a torch.device); None leaves it on the CPU.
        cache_dir: the Hugging Face cache to look hub ids up in (default: HF_HUB_CACHE, else HF_HOME/hub, else
            ~/.cache/huggingface/hub).
        revision: for a hub id, the cached revision: a branch or tag name (refs/NAME) or a commit hash (default:
            main, or the id's own "@REVISION").

    Returns:
        The native model (a Hugging Face or timm module). glmc remembers its directory, so data specs use its saved
        tokenizer and saved results keep its tokenizer and training record.

    Raises:
        BadCheckpoint: missing, truncated, pickle-refused or otherwise unreadable files; a hub id or revision not in
            the cache (the message names the `hf download` command that fetches it).
        UnsupportedModel: a model family or feature glmc cannot transform exactly.
    """
    path = resolve_model_path(path_or_id, revision, cache_dir)
    model, _ = load_checked(path)
    remember(model, path)
    if device is not None:
        model.to(device)
    return model


def save_model(model, directory, overwrite: bool = False, dtype=None, max_shard_size=None) -> Path:
    """Write `model` to `directory` atomically, in its family's own format (for Hugging Face models exactly
    what `save_pretrained` writes), with the tokenizer and glmc.json of the directory it was loaded from.

    Args:
        dtype: the weights' dtype on disk ("bfloat16", "float16", "float32", "float64"; None: the model's own).
        max_shard_size: Hugging Face weights above this size (bytes, or a string such as "500MB") are written as
            shards model-0000k-of-0000n.safetensors with model.safetensors.index.json; None: glmc's default, 5GB.
    The output may not be, contain or lie inside the directory the model was loaded from."""
    with atomic_dir(directory, overwrite=overwrite, inputs=[source_of(model)]) as tmp:
        write_like(model, source_of(model), tmp, dtype=dtype, max_shard_size=max_shard_size)
    return Path(directory)


def align(model_a, model_b, method: str = "weight", data=None, *, options=None, compute_dtype="float32", dtype=None,
          **kw) -> Alignment:
    """Find the symmetry transform π that brings `model_b` next to `model_a`.

    Args:
        model_a, model_b: native models of one family and depth. If their widths differ, the narrower one is
            embedded exactly into the wider architecture first and aligned to the wider one, which stays fixed.
        method: "weight" (data-free weight matching), "activation" (correlation of activations),
            "activation-perm" (the same with a permuted residual stream: Verma & Elbayad's baseline), "learned"
            (the paper's Algorithm 1, started from weight matching), "learned-perm" (permutations only, the
            Git Re-Basin straight-through baseline) or "none" (the raw pair).
        data: what activation and learned matching train on (weight matching reads only its seen tokens, with
            seen_tokens or in circuit mode, and chooses among candidates on it):
            a spec ("shakespeare", "mnist", …), a DataLoader or any iterable of batches (token tensors, or
            (images, labels) pairs), or a dict of them per split;
            None: the data recorded beside model A (see glmc/api/data.py).
        options: the method's options object (`glmc.WeightOptions`, `glmc.ActivationOptions` or
            `glmc.LearnedOptions`); keyword options given as well override its fields.
        compute_dtype: the precision the pair is aligned in, "float32" (default) or "float64": inputs stored in
            bfloat16 or float16 are upcast copies (their values exactly); the function check (max |Δlogits|
            ≤ 1e-4) runs in it, on the transformed weights before any rounding.
        dtype: what `.save` writes the moved model in (None: its input's stored dtype, e.g. bfloat16). The
            rounding's own effect is measured on probe inputs (report["rounding"]: max |Δlogits| between the
            moved model and its rounded copy, both computed in compute_dtype), not checked against 1e-4.
        **kw: the method's own options, keyword only: the fields of its options class, listed under "Options by
            method" below (generated from the classes, glmc/options.py). An unknown one raises TypeError listing
            the valid ones; a bad value raises BadOption. Pairs of different widths also take null_space.

    Returns:
        An `Alignment`: `.model_b` is π(B), a native model with exactly B's function (checked: max |Δlogits|
        ≤ 1e-4, in `.report`), `.transform` the `glmc.Transform` π, `.save(directory)` writes them.

    Raises:
        IncompatibleModels: different families, depths or head layouts. BadOption: an option value glmc cannot
        use. BadData: a data-driven method without data. TypeError: an unknown option.
    """
    record = method_record(method)  # an unknown method is refused by name
    opts, pair = _method_options(method, options, kw)
    given = {**(opts.as_dict() if opts is not None else {}), **pair}
    compute = torch_dtype(compute_dtype, "compute_dtype", COMPUTE_DTYPES)
    _check([model_a, model_b])
    model_a, model_b = in_dtype(model_a, compute), in_dtype(model_b, compute)
    if record.data == "required":
        given["data"] = resolve_data(data, model_a, required=f"{method} matching")
    elif given.get("seen_tokens"):  # weight matching's paper-style fit of the seen embedding rows
        given["data"] = resolve_data(data, model_a, required=f"{method} matching with seen_tokens=True")
    elif record.needs_data(model_a, given):  # e.g. weight matching choosing among candidates, on data if any
        given["data"] = resolve_data(data, model_a)
    # the options object travels whole; the pair option and the data beside it
    al = match(model_a, model_b, method, opts, **pair, **({"data": given["data"]} if "data" in given else {}))
    _inherit(al.model_a, model_a)
    _inherit(al.model_b, model_b)
    groups = _groups(al.model_a)
    transform = None if al.transform is None else Transform(al.transform, groups)
    result = Alignment(al.model_a, al.model_b, transform, al.report, method, al.moved, al.fill,
                       (source_of(model_a), source_of(model_b)))
    moved_input = model_b if al.moved == "B" else model_a
    result.dtype = _rounding(result.moved_model, torch_dtype(dtype) or stored_dtype(moved_input), al.report)
    al.report["dtypes"] = {"compute": _name(compute), "inputs": [_name(stored_dtype(m)) for m in (model_a, model_b)],
                           "written": result.dtype}
    result.provenance = provenance(options=full_options(method, {**given, "compute_dtype": compute_dtype}),
                                   data=_data_record(given.get("data")), models=_sources(model_a, model_b),
                                   seeds=[given["seed"]] if "seed" in given else None)
    return result


def _sources(*models) -> list:
    """The models as provenance records them: their directories when glmc loaded them, else the modules."""
    return [source_of(m) or m for m in models]


def _data_record(ds, batches=None) -> dict | None:
    if ds is None:
        return None
    spec = getattr(ds, "spec", None) if not isinstance(ds, (str, dict)) else ds
    return {"spec": spec if spec is not None else type(ds).__name__, "batches": batches}


def _method_options(method: str, options, kw: dict) -> tuple:
    """(`method`'s options object, validated by its class: an unknown name TypeError, a bad value BadOption, an old
    name DeprecationWarning; or None for a method without options) and the pair option beside it."""
    cls = method_record(method).options
    # the pair option a class may not declare ("none" has no class; a plugin's may lack it): checked and kept as is
    pair = {} if cls is not None and "null_space" in cls.names() else \
        {k: kw.pop(k) for k in ("null_space",) if k in kw}
    if pair.get("null_space") is not None:
        WeightOptions(null_space=pair["null_space"])  # the same choices
    if cls is None:  # "none": the raw pair; only pairs of different widths take an option
        if options is not None:
            raise TypeError(f"method {method!r} takes no options object")
        if kw:
            raise TypeError(f"{method} matching got unknown option(s) {', '.join(sorted(kw))}; its options: "
                            "null_space")
        return None, pair
    return cls.build(options, _stacklevel=4, **kw), {k: v for k, v in pair.items() if v is not None}


def _check(models) -> None:
    """`glmc inspect`'s compatibility check (glmc/models/inspect.py): IncompatibleModels with its first reason."""
    check_models(models, [source_of(m) or f"model {i + 1}" for i, m in enumerate(models)])


def _name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _rounding(model, target, report: dict) -> str:
    """Measure what rounding `model`'s weights to `target` for writing does to its function (max |Δlogits| on
    probe inputs, both computed in the model's own precision), into report["rounding"]; returns the target's name."""
    if target != weights_dtype(model):
        rounded = cast_copy(model, target).to(weights_dtype(model))
        report["rounding"] = {"dtype": _name(target), "max_dlogits": max_logit_change(model, rounded)}
    return _name(target)


def _inherit(derived, model) -> None:
    """A model derived from `model` (same function, or an average) keeps its data, tokenizer and stored dtype."""
    if derived is not model and source_of(model) is not None:
        remember(derived, source_of(model))
    if derived is not model:
        remember_dtype(derived, stored_dtype(model))


_align_pair = align  # `barrier` takes an argument named `align`


def _groups(model):
    return dict(adapter_for(model).arch(model).groups)


def barrier(model_a, model_b=None, data=None, points: int | None = None, align=None, *, batches=None, options=None,
            compute_dtype="float32", **kw):
    """Loss and accuracy along the straight line between two models (or over the simplex of several).

    Args:
        model_a, model_b: the endpoints; or `model_a` a list of k ≥ 2 models (and no `model_b`): k ≥ 3 gives the
            simplex Σ λ_m·θ_m.
        data: evaluation (and, for data-driven alignment, training) data; see `glmc.align`.
        points: λ grid points, endpoints included (pairs); None: the options' (11).
        align: None or "none" (the raw checkpoints), a method name (aligned first, with the alignment options
            among `kw`), or an `Alignment` already computed for this pair. Alignment options are those of
            `glmc.align`; an option of another method is ignored (one set serves a loop over methods), one no
            method takes raises TypeError. Several models: "none", "weight" or "learned", each aligning all
            models to a shared universe (see `glmc.merge`, whose options they then are).
        batches: the caller's own evaluation batches, instead of `split`, `batch_size` and `max_batches` of `data`.
        options: a `glmc.BarrierOptions` (the evaluation), or the alignment method's options object, or a tuple
            of both; keyword options override their fields.
        compute_dtype: the endpoints' precision for alignment and averaging ("float32" or "float64"); endpoints
            stored in bfloat16 / float16 are upcast copies, so their barrier is that of float32 copies of them.
        **kw: the evaluation's options (the fields of `glmc.BarrierOptions`, listed below: split, batch_size,
            max_batches, mode, eval_dtype, seeds, resolution, samples, progress) and the alignment's (mode and
            progress apply to both). `batch_size` is the evaluation batch size; a data-driven alignment's
            training batch size is `train_batch_size`.

    With `seeds` and a stochastic method (one whose alignment takes a `seed`: learned, learned-perm), the pair is
    aligned once per seed and the spread of the barrier over them reported (`info["repeats"]`,
    `info["over_seeds"]`: mean, sd and standard error of each metric); the curve returned is the first seed's.
    Other methods ignore `seeds` (recorded as deterministic). Every pair's curve carries standard errors over its
    evaluation batches (`metrics`: loss_barrier_se, …, loss_se per λ) and says how many predictions it used
    (`info`: n_predictions; unit, the task's: "tokens" or "images").

    Returns:
        A `Curve` (`.lambdas`, `.loss`, `.accuracy`, `.barrier` — the paper's max_λ L(λ) − [(1−λ)L(0) + λL(1)] —,
        `.barrier_mean` — Git Re-Basin's —, `.plot()`, `.to_json()`), or a `Simplex` for three or more models.
    """
    models = list(model_a) if isinstance(model_a, (list, tuple)) else [model_a, model_b]
    if any(m is None for m in models) or len(models) < 2:
        raise TypeError("barrier needs two models (model_a, model_b) or a list of at least two")
    ev, align_options = _barrier_options(options, points, kw)
    split, batch_size, max_batches, mode, progress = ev.split, ev.batch_size, ev.max_batches, ev.mode, ev.progress
    dtype = ev.eval_dtype
    compute = torch_dtype(compute_dtype, "compute_dtype", COMPUTE_DTYPES)
    models = [in_dtype(m, compute) for m in models]
    method = "none" if align is None else align.method if isinstance(align, Alignment) else align
    needs_data = batches is None or (not isinstance(align, Alignment) and method_record(method).data == "required")
    ds = resolve_data(data, models[0], required="a barrier" if needs_data and batches is None else None)
    if len(models) > 2:
        return _simplex(models, ds, method, evaluation_batches(ds, models[0], split, batch_size, max_batches,
                                                                batches), mode, progress, ev.resolution, ev.samples,
                        align_options, dtype)
    if ev.seeds is not None and not isinstance(align, Alignment):
        return _repeats(model_a, model_b, ds, method, list(ev.seeds), batches, ev, align_options)
    t0 = time.perf_counter()
    if isinstance(align, Alignment):
        al = align
    else:  # "none" too: a pair of different widths is embedded into the wider architecture first

        # options of any method are accepted, so one set serves a loop over methods; one no method takes raises
        options = method_options(method, {**align_options, "progress": progress, "mode": mode})
        al = _align_pair(models[0], models[1], method, data=ds, **options)
    align_seconds = time.perf_counter() - t0
    ends = [al.model_a, al.model_b]
    evals = evaluation_batches(ds, models[0], split, batch_size, max_batches, batches)
    if mode == "circuit":
        ends = [circuit_model(m) for m in ends]
    task = _task(models[0])
    c = path_curve(ends, evals, task, ev.points, progress, label=method, dtype=dtype)
    info = {"align_seconds": align_seconds, "curve_seconds": c["seconds"], "mode": mode,
            "dtype": _dtype_name(dtype) or _name(next(ends[0].parameters()).dtype),
            "parameters": sum(p.numel() for p in ends[0].parameters()), "n_batches": len(evals),
            "n_predictions": sum(c["batch_stats"]["n"]), "unit": get_task(task).unit}
    if batches is None:
        info["split"] = split
    curve = Curve(c["lambdas"], c["loss"], c["acc"], method, al, info, batch_stats=c["batch_stats"], batches=evals)
    curve.provenance = provenance(options={"barrier": ev.as_dict(), "align": _align_record(method, al, align_options)},
                                  data=_data_record(ds, evals), models=_sources(*models[:2]),
                                  seeds=list(ev.seeds) if ev.seeds is not None else None)
    return curve


def _align_record(method: str, al: Alignment, align_options: dict) -> dict:
    """The alignment's full options: those its own provenance recorded, or the method's defaults under what was
    given (an Alignment passed in, or "none")."""
    own = (al.provenance or {}).get("options")
    return own if own else full_options(method, {k: v for k, v in align_options.items() if k != "data"})


def _barrier_options(options, points, kw: dict) -> tuple[BarrierOptions, dict]:
    """(the evaluation's BarrierOptions, the alignment's options) from barrier's `options`, `points` and keywords:
    the names BarrierOptions has (or had) are the evaluation's, the others the alignment's."""
    given = options if isinstance(options, tuple) else (options,)
    if not all(o is None or isinstance(o, Options) for o in given):
        raise TypeError("barrier's options is a BarrierOptions, an alignment method's options object, or both")
    base = next((o for o in given if isinstance(o, BarrierOptions)), None)
    own = set(BarrierOptions.names()) | set(RENAMED["BarrierOptions"])
    evaluation = {k: v for k, v in kw.items() if k in own}
    if points is not None:
        evaluation["points"] = points
    ev = BarrierOptions.build(base, _stacklevel=4, **evaluation)
    align_options = {}
    for o in given:
        if o is not None and not isinstance(o, BarrierOptions):
            shared = sorted(set(o.changed()) & {"mode", "progress"})
            if shared:
                raise BadOption(f"a barrier's {shared[0]} is its alignment's too: set it on BarrierOptions or as a "
                                "keyword, not on the method's options")
            align_options.update(o.changed())
    align_options.update({k: v for k, v in kw.items() if k not in own})
    return ev, align_options


REPEATED = ("loss_barrier", "loss_barrier_mean", "acc_drop", "acc_drop_mean")


def stochastic(method: str) -> bool:
    """Whether a method's alignment depends on a random seed (its record says so)."""
    return method_record(method).stochastic


def _repeats(model_a, model_b, ds, method, seeds, batches, ev: BarrierOptions, align_options) -> Curve:
    """The barrier once per seed (stochastic methods), the first seed's curve carrying the spread."""
    if not seeds:
        raise BadOption("seeds: give at least one seed")
    once = dataclasses.replace(ev, seeds=None)
    if not stochastic(method):
        curve = barrier(model_a, model_b, ds, None, method, batches=batches, options=once, **align_options)
        curve.info["repeats"] = "deterministic"
        return curve
    curves = [barrier(model_a, model_b, ds, None, method, batches=batches, options=once,
                      **{**align_options, "seed": s}) for s in seeds]
    rows = [{"seed": s, **{k: c.metrics[k] for k in REPEATED}, "loss_barrier_se": c.metrics.get("loss_barrier_se")}
            for s, c in zip(seeds, curves)]
    first = curves[0]
    first.info["repeats"] = rows
    first.info["over_seeds"] = {k: spread([r[k] for r in rows]) for k in REPEATED}
    return first


def spread(values: list) -> dict:
    """{"mean", "sd" (n − 1), "se" (sd/√n), "n"} of a list of numbers (sd and se None for one value)."""
    n = len(values)
    mean = sum(values) / n
    sd = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5 if n > 1 else None
    return {"mean": mean, "sd": sd, "se": None if sd is None else sd / n ** 0.5, "n": n}


def _task(model) -> str:
    return adapter_for(model).arch(model).task


def _dtype_name(dtype) -> str | None:
    d = eval_dtype(dtype)
    return None if d is None else str(d).removeprefix("torch.")


def _simplex(models, ds, method, evals, mode, progress, resolution, samples, options, dtype=None) -> Simplex:
    if not method_record(method).simplex:
        raise BadOption(f"simplex barriers (3+ models) support {', '.join(method_names(simplex=True))}, not "
                        f"{method!r}")
    t0 = time.perf_counter()
    aligned = list(models)
    if method_record(method).merge is not None:  # else the raw checkpoints
        aligned = merge(models, method, data=ds, progress=progress, mode=mode, **options).aligned
    ends = aligned
    if mode == "circuit":
        ends = [circuit_model(m) for m in aligned]
    align_seconds = time.perf_counter() - t0
    s = simplex_surface(ends, evals, _task(models[0]), resolution, samples, progress, label=method, dtype=dtype)
    info = {"align_seconds": align_seconds, "surface_seconds": s["seconds"], "mode": mode, "n_batches": len(evals),
            "dtype": _dtype_name(dtype)}
    result = Simplex([list(p) for p in s["points"]], s["loss"], s["acc"], method, aligned, info)
    result.info["provenance"] = provenance(options={"method": method, "mode": mode, "resolution": resolution,
                                                    "samples": samples, **options},
                                           data=_data_record(ds, evals), models=_sources(*models))
    return result


UNIVERSE_OPTIONS = ("rounds", "iterations", "mode", "null_space", "progress")


def merge(models, method: str = "weight", data=None, weights=None, *, options=None, compute_dtype="float32",
          dtype=None, **kw) -> Merge:
    """Align every model to a shared universe and average them into one model of the same architecture.

    Args:
        models: two or more native models of one family and depth (narrower ones are embedded into the widest).
        method: "weight" (universe weight matching: start from model 1, align each model to the current average,
            re-average, `rounds` times) or "learned" (then refine all transforms jointly with λ drawn on the
            simplex; needs `data`).
        data: training data for "learned"; see `glmc.align`.
        weights: merge weights, one per model, summing to 1 (default uniform).
        options: a `glmc.MergeOptions`; keyword options override its fields.
        compute_dtype: the precision models are aligned and averaged in ("float32" or "float64"; bfloat16 /
            float16 inputs are upcast copies).
        dtype: what `.save` writes the merged model in (None: model 1's stored dtype); each aligned model is
            written in its own input's. The rounding's effect on the merged model is in report["rounding"].
        **kw: the merge's options, keyword only: the fields of `glmc.MergeOptions`, listed below (generated):
            rounds, iterations, mode ("circuit": average the paper's circuit form; the result is a glmc
            CircuitModel), null_space (embedded narrower models' free reader weights), and the learned
            refinement's training (used with method="learned"). An unknown one raises TypeError, a bad value
            BadOption.

    Returns:
        A `Merge`: `.model` (the merged model), `.aligned` (each input aligned, same function), `.transforms`,
        `.report`, `.save(directory)`.
    """
    models = list(models)
    if len(models) < 2:
        raise TypeError("merge needs at least two models")
    opts = MergeOptions.build(options, _stacklevel=3, **kw)
    rounds, iterations, mode, null_space, progress = opts.rounds, opts.iterations, opts.mode, opts.null_space, \
        opts.progress
    # the refinement's options the caller set (the others are LearnedMatcher.fit's defaults, the same values)
    learned_options = {k: v for k, v in opts.changed().items() if k not in UNIVERSE_OPTIONS}
    compute = torch_dtype(compute_dtype, "compute_dtype", COMPUTE_DTYPES)
    _check(models)
    models = [in_dtype(m, compute) for m in models]
    if mode not in ("native", "circuit"):
        raise BadOption(f"unknown mode {mode!r}; choose native or circuit")
    record = method_record(method)
    merge_models = record.merge_function()  # a method that cannot merge is refused by name
    ds = resolve_data(data, models[0], required=f"{method} merging" if record.data == "required" else None)
    if record.trains:
        learned_options.setdefault("steps", opts.steps)
    merged, aligned, transforms, report = merge_models(models, method, weights, rounds, iterations, data=ds,
                                                       progress=progress, mode=mode, null_space=null_space,
                                                       **learned_options)
    if mode == "circuit":  # average whole circuits (the paper's form)

        circuits = [circuit_model(a) for a in aligned]
        ws = report["weights"]
        params = {k.replace("__", "."): sum(w * dict(c.p.items())[k] for w, c in zip(ws, circuits))
                  for k in circuits[0].p}
        merged = CircuitModel(circuits[0].config, params).eval()
    for derived, model in zip(aligned, models):
        _inherit(derived, model)
    if mode == "native":
        _inherit(merged, models[0])
    groups = _groups(aligned[0])
    result = Merge(merged, aligned, [Transform(t, groups) for t in transforms], report,
                   [source_of(m) for m in models], mode)
    result.dtypes = [_name(stored_dtype(m)) for m in models]
    if mode == "native":
        result.dtype = _rounding(merged, torch_dtype(dtype) or stored_dtype(models[0]), report)
    report["dtypes"] = {"compute": _name(compute), "inputs": result.dtypes, "written": result.dtype}
    report["provenance"] = provenance(options={"method": method, **opts.as_dict(), "weights": weights,
                                               "compute_dtype": compute_dtype},
                                      data=_data_record(ds), models=_sources(*models),
                                      seeds=[opts.seed] if record.stochastic else None)
    return result


def evaluate(model, data=None, split: str = BarrierOptions.split, batch_size: int = BarrierOptions.batch_size,
             max_batches: int | None = BarrierOptions.max_batches, batches=None) -> dict:
    """Mean loss and accuracy of `model` on `data` (see `glmc.align`; None: the data recorded beside the model).

    Returns:
        {"loss": mean cross-entropy (nats per token or per image), "acc": accuracy, "n": predictions counted}.
    """
    ds = resolve_data(data, model, required=None if batches is not None else "evaluation")
    return run(model, evaluation_batches(ds, model, split, batch_size, max_batches, batches), _task(model))


def verify(model, classes=None, seed: int = 0, tol: float = 1e-4) -> dict:
    """Apply random elements of every symmetry class the model declares (alone, composed, inverted, and the
    exact widening) and measure how far the logits move.

    Returns:
        {class name: max |Δlogits|}; every value ≤ `tol` means the transforms keep the function, as they must.
        The full checks (|Δloss|, seconds, ok) are in the dict's `.checks` attribute.

    Raises:
        UnsupportedModel: a class in `classes` that is not exact for this model.
    """

    checks = verify_model(in_dtype(model, torch.float32), seed=seed, tol=tol, classes=classes)
    out = Verification({c.name: c.max_dlogits for c in checks})
    out.checks = checks
    return out


class Verification(dict):
    """{class: max |Δlogits|}, with `.checks` (the full records) and `.ok` (every class within tolerance)."""

    checks: list

    @property
    def ok(self) -> bool:
        """Whether every class kept the function within the tolerance."""
        return all(c.ok for c in self.checks)


def _generated_options_doc() -> None:
    """The options part of help(align), help(barrier) and help(merge), generated from the options classes."""
    align.__doc__ = (f"{inspect.cleandoc(align.__doc__ or '')}\n\nOptions by method (glmc/options.py):\n"
                     f"{methods_doc(BUILTIN)}\n")
    barrier.__doc__ = (f"{inspect.cleandoc(barrier.__doc__ or '')}\n\nEvaluation options (glmc.BarrierOptions):\n"
                       f"{BarrierOptions.describe()}\n\nAlignment options: those of glmc.align (help(glmc.align)).\n")
    merge.__doc__ = (f"{inspect.cleandoc(merge.__doc__ or '')}\n\nOptions (glmc.MergeOptions):\n"
                     f"{MergeOptions.describe()}\n")


_generated_options_doc()
