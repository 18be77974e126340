"""`glmc merge M1 M2 … Mk --out DIR`: align every model to a shared universe and average them."""

import click

from glmc.commands.common import data_options, load_eval_data, load_models, mode_option, pick_device, write_json


@click.command("merge")
@click.argument("models", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for the merged model; aligned/ holds each aligned model, merge.json the report.")
@click.option("--method", default="weight", show_default=True, type=click.Choice(["weight", "learned"]))
@click.option("--weights", default=None, help="Comma-separated merge weights (default: uniform).")
@click.option("--rounds", default=3, show_default=True, help="Universe rounds (align to the average, re-average).")
@click.option("--iterations", default=5, show_default=True, help="Weight-matching iterations per alignment.")
@click.option("--steps", default=300, show_default=True, help="Learned refinement steps.")
@click.option("--lr", default=None, type=float, help="Learned refinement learning rate [1e-2; the paper: 3e-4].")
@click.option("--concentration", default=None, type=float,
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
    from pathlib import Path

    from glmc.align.nullspace import save_fill
    from glmc.commands.common import save_like
    from glmc.evaluate import evaluate
    from glmc.io import atomic_dir
    from glmc.merge import merge_models

    if len(models) < 2:
        raise click.UsageError("give at least two models")
    if Path(out_dir).exists() and not overwrite:
        raise click.ClickException(f"{out_dir} exists (pass --overwrite to replace it)")
    w = [float(x) for x in weights.split(",")] if weights else None
    if w is not None and len(w) != len(models):
        raise click.UsageError(f"{len(w)} weights for {len(models)} models")
    device = pick_device(data_kw.pop("device"))
    loaded = load_models(models, device)
    ds, batches, info = load_eval_data(models[0], **data_kw)
    merged, aligned, transforms, report = merge_models(
        [m.cpu() for m in loaded], method, w, rounds, iterations, data=ds, progress=progress, steps=steps, lr=lr,
        concentration=concentration, mode=mode, null_space=null_space)
    if mode == "circuit":  # average whole circuits (the paper's form); the result is a glmc CircuitModel
        from glmc.circuit import CircuitModel, circuit_model

        circuits = [circuit_model(a) for a in aligned]
        ws = w or [1 / len(circuits)] * len(circuits)
        params = {k.replace("__", "."): sum(wi * dict(c.p.items())[k] for wi, c in zip(ws, circuits))
                  for k in circuits[0].p}
        merged = CircuitModel(circuits[0].config, params).eval()
    scores = {"merged": evaluate(merged, batches, ds.task)}
    for i, m in enumerate(loaded):
        scores[f"model{i + 1}"] = evaluate(m.cpu(), batches, ds.task)
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
