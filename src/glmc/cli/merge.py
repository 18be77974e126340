"""`glmc merge M1 M2 … Mk --out DIR`: align every model to a shared universe and average them."""

import click

from glmc import distributed
from glmc.cli.common import (
    MODEL,
    check_out_path,
    data_options,
    load_eval_data,
    load_models,
    pick_device,
    precision_options,
    resolve_models,
    revision_option,
    rounding_line,
)
from glmc.cli.flags import method_flags, take
from glmc.cli.recipe import TOP as RECIPE_KEYS
from glmc.methods import method as method_record
from glmc.methods import names, summary_lines
from glmc.options import MergeOptions


@click.command("merge")
@click.argument("models", nargs=-1, type=MODEL)
@click.option("--config", "config", default=None, type=click.Path(exists=True, dir_okay=False),
              help=f"A YAML recipe with the keys {', '.join(sorted(RECIPE_KEYS))} (options: the flags below as "
                   "keys, e.g. rounds: 3); the format, with an example: docs/howto/merge-recipe.md. The command "
                   "line then only takes --out, --overwrite, --device and --progress.")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Directory for the merged model; aligned/ holds each aligned model, merge.json the report.")
@click.option("--method", default="weight", show_default=True, type=click.Choice(names(merges=True)),
              help=f"{summary_lines(names(merges=True))}.")
@click.option("--weights", default=None, help="Comma-separated merge weights (default: uniform).")
@method_flags(MergeOptions, skip=("batch_size",))
@click.option("--overwrite", is_flag=True)
@click.option("--no-eval", is_flag=True,
              help="Skip evaluating the merged and input models (weight merges then need no data at all).")
@precision_options()
@revision_option
@data_options
def command(models, config, out_dir, method, weights, overwrite, no_eval, compute_dtype, out_dtype, max_shard_size,
            revision, **kw):
    """Merge MODELS into one standard checkpoint of the same architecture. Every aligned model keeps its
    function (checked); the inputs are only read. Models of different widths are embedded into the widest.
    With --config, the models and every setting come from a YAML recipe instead. The flags after --weights are
    glmc.MergeOptions' fields (the refinement's are used with --method learned)."""
    from glmc.api import merge
    from glmc.models.evaluate import evaluate

    options = take(kw, MergeOptions)
    data_kw = kw
    progress = options.pop("progress") and distributed.is_main()  # one set of progress bars under a launch
    mode = options.pop("mode")

    device = pick_device(data_kw.pop("device"))
    if config:
        models, method, w, mode, options, data_kw, out_dir = _from_recipe(config, models, out_dir)
    else:
        if out_dir is None:
            raise click.UsageError("give --out DIR (or a recipe with --config)")
        w = _parse_weights(weights, len(models)) if weights else None
    if len(models) < 2:
        raise click.UsageError("give at least two models")
    models = resolve_models(models, revision)
    check_out_path(out_dir, "--out", overwrite, directory=True, inputs=models)
    loaded = load_models(models, device, compute_dtype)
    # a weight merge without evaluation needs no data; learned refinement trains on it either way
    ds, batches, info = (None, None, {}) if no_eval and method_record(method).data != "required" else \
        load_eval_data(models[0], model=loaded[0], **data_kw)
    if no_eval:
        batches = None
    result = merge(loaded, method, data=ds, weights=w, mode=mode, progress=progress, compute_dtype=compute_dtype,
                   dtype=None if out_dtype == "auto" else out_dtype, **options)
    scores = {}
    if batches is not None:
        scores["merged"] = evaluate(result.model, batches, ds.task)
        for i, m in enumerate(loaded):
            scores[f"model{i + 1}"] = evaluate(m, batches, ds.task)
    result.report.update({"models": [str(m) for m in models], "scores": scores, **info})
    if config:
        result.report["recipe"] = str(config)
    if distributed.is_main():  # every process holds the same result; the main one writes it
        result.save(out_dir, overwrite=True, max_shard_size=max_shard_size)
    for name, s in scores.items():
        click.echo(f"{name:>8}: {info['split']} loss {s['loss']:.4f}  acc {100 * s['acc']:.2f}%")
    if not scores:
        click.echo("not evaluated (--no-eval)")
    click.echo(f"max |Δlogits| of the aligned models: {max(result.report['max_dlogits']):.2e}")
    if rounding_line(result.report):
        click.echo(rounding_line(result.report))
    click.echo(f"wrote {out_dir}/ (merged model, aligned/, merge.json)")


# what a recipe sets; with --config these may not also be given on the command line
RECIPE_FLAGS = ("method", "weights", *(n for n in MergeOptions.names() if n != "progress"),
                "data", "tokenizer", "split", "batch_size", "max_batches", "max_tokens")


def _from_recipe(config, models, out_dir):
    from click.core import ParameterSource

    from glmc.cli.recipe import read_recipe

    ctx = click.get_current_context()
    given = [f"--{k.replace('_', '-')}" for k in RECIPE_FLAGS
             if ctx.get_parameter_source(k) is ParameterSource.COMMANDLINE]
    if models or given:
        what = "models" if models else ", ".join(given)
        raise click.UsageError(f"with --config, give {what} in the recipe, not on the command line")
    r = read_recipe(config)
    out_dir = out_dir or r.get("output")
    if out_dir is None:
        raise click.UsageError(f"{config} has no 'output'; add one or pass --out DIR")
    data_kw = {"data": r.get("data"), "tokenizer": r.get("tokenizer"), "split": "test", "batch_size": 32,
               "max_batches": None, "max_tokens": None, **r["evaluation"]}
    return r["models"], r["method"], r.get("weights"), r["mode"], dict(r["options"]), data_kw, out_dir


def _parse_weights(text: str, k: int) -> list[float]:
    """--weights: k comma-separated non-negative numbers that sum to 1."""
    import math

    try:
        w = [float(x) for x in text.split(",")]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of numbers (e.g. 0.5,0.5)",
                                 param_hint="--weights") from None
    if len(w) != k:
        raise click.BadParameter(f"{len(w)} weights for {k} models; give one per model", param_hint="--weights")
    if not all(math.isfinite(x) and x >= 0 for x in w):
        raise click.BadParameter(f"weights must be non-negative numbers, got {text!r}", param_hint="--weights")
    if abs(sum(w) - 1) > 1e-6:
        raise click.BadParameter(f"weights must sum to 1, got {text!r} (sum {sum(w):g})", param_hint="--weights")
    return w
