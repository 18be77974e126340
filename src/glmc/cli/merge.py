"""`glmc merge M1 M2 … Mk --out DIR`: align every model to a shared universe and average them."""

import click

from glmc.cli.common import (check_out_path, data_options, load_eval_data, load_models, mode_option,
                                  pick_device, write_json)

POSITIVE = click.FloatRange(min=0, min_open=True)


@click.command("merge")
@click.argument("models", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for the merged model; aligned/ holds each aligned model, merge.json the report.")
@click.option("--method", default="weight", show_default=True, type=click.Choice(["weight", "learned"]))
@click.option("--weights", default=None, help="Comma-separated merge weights (default: uniform).")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(min=1),
              help="Universe rounds (align to the average, re-average).")
@click.option("--iterations", default=5, show_default=True, type=click.IntRange(min=1),
              help="Weight-matching iterations per alignment.")
@click.option("--steps", default=300, show_default=True, type=click.IntRange(min=1), help="Learned refinement steps.")
@click.option("--lr", default=None, type=POSITIVE, help="Learned refinement learning rate [1e-2; the paper: 3e-4].")
@click.option("--concentration", default=None, type=POSITIVE,
              help="Learned refinement draws λ ~ Dirichlet(concentration) on the simplex [1: uniform; the paper: "
                   "0.1, which puts most draws next to a vertex, where there is no gradient].")
@click.option("--null-space", default="fixed", show_default=True, type=click.Choice(["fixed", "off"]),
              help="Models narrower than the widest: their free reader weights (exact either way) [fixed: the "
                   "full-width models' average; off: zero].")
@click.option("--overwrite", is_flag=True)
@mode_option
@click.option("--progress/--no-progress", default=True, show_default=True)
@data_options
def command(models, out_dir, method, weights, rounds, iterations, steps, lr, concentration, null_space, mode,
            overwrite, progress, **data_kw):
    """Merge MODELS into one standard checkpoint of the same architecture. Every aligned model keeps its
    function (checked); the inputs are only read. Models of different widths are embedded into the widest."""
    from glmc.align.nullspace import save_fill
    from glmc.cli.common import save_like
    from glmc.models.evaluate import evaluate
    from glmc.io import atomic_dir
    from glmc.align.merge import merge_models

    if len(models) < 2:
        raise click.UsageError("give at least two models")
    check_out_path(out_dir, "--out", overwrite, directory=True)
    w = _parse_weights(weights, len(models)) if weights else None
    device = pick_device(data_kw.pop("device"))
    loaded = load_models(models, device)
    ds, batches, info = load_eval_data(models[0], model=loaded[0], **data_kw)
    merged, aligned, transforms, report = merge_models(
        loaded, method, w, rounds, iterations, data=ds, progress=progress, steps=steps, lr=lr,
        concentration=concentration, mode=mode, null_space=null_space)
    if mode == "circuit":  # average whole circuits (the paper's form); the result is a glmc CircuitModel
        from glmc.view.circuit import CircuitModel, circuit_model

        circuits = [circuit_model(a) for a in aligned]
        ws = w or [1 / len(circuits)] * len(circuits)
        params = {k.replace("__", "."): sum(wi * dict(c.p.items())[k] for wi, c in zip(ws, circuits))
                  for k in circuits[0].p}
        merged = CircuitModel(circuits[0].config, params).eval()
    scores = {"merged": evaluate(merged, batches, ds.task)}
    for i, m in enumerate(loaded):
        scores[f"model{i + 1}"] = evaluate(m, batches, ds.task)
    report.update({"schema": "glmc.merge/1", "models": [str(m) for m in models], "scores": scores, **info})
    with atomic_dir(out_dir) as tmp:
        if mode == "circuit":
            merged.write_files(tmp)
        else:
            save_like(merged, models[0], tmp)
        fills = report.pop("fills", {})
        for i, (a, t) in enumerate(zip(aligned, transforms)):
            save_like(a, models[i], tmp / "aligned" / f"model{i + 1}")
            if t.elements:
                t.save(tmp / "aligned" / f"model{i + 1}" / "transform.safetensors")
            if fills.get(i):  # an embedded narrower model: added after the transform (see glmc align --help)
                save_fill(fills[i], tmp / "aligned" / f"model{i + 1}" / "null_space_fill.safetensors")
        write_json(tmp / "merge.json", report)
    for name, s in scores.items():
        click.echo(f"{name:>8}: {info['split']} loss {s['loss']:.4f}  acc {100 * s['acc']:.2f}%")
    click.echo(f"max |Δlogits| of the aligned models: {max(report['max_dlogits']):.2e}")
    click.echo(f"wrote {out_dir}/ (merged model, aligned/, merge.json)")


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
