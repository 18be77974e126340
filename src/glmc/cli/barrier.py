"""`glmc barrier A B [C …]`: loss and accuracy along the path between models, per alignment method."""

import click

from glmc import distributed
from glmc.cli.common import (
    MODEL,
    check_out_path,
    check_plot_path,
    data_options,
    load_eval_data,
    load_models,
    mode_option,
    parse_methods,
    pick_device,
    precision_options,
    progress_option,
    resolve_models,
    revision_option,
    write_json,
)
from glmc.cli.flags import flag, method_flags, renamed_flag, take
from glmc.methods import method as method_record
from glmc.methods import names, option_classes, summary_lines
from glmc.options import BarrierOptions, MergeOptions, field_of


@click.command("barrier")
@click.argument("models", nargs=-1, required=True, type=MODEL)
@click.option("--align", "methods", default="none", show_default=True,
              help=f"Comma-separated alignment methods: {summary_lines()}. Three or more models: "
              f"{', '.join(names(simplex=True))}.")
@flag(BarrierOptions, "points")
@data_options
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write all results as JSON here.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Write the per-λ curves as CSV here.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write the loss/accuracy figure here.")
@method_flags(*option_classes(), skip=("mode", "progress", "batch_size", "batches"))
@flag(BarrierOptions, "resolution")
@flag(BarrierOptions, "samples")
@flag(MergeOptions, "concentration",
      help="3+ models, learned: " + field_of(MergeOptions, "concentration").metadata["help"])
@flag(BarrierOptions, "eval_dtype")
@renamed_flag("--dtype", "--eval-dtype", "old_dtype", type=click.Choice(["float32", "bfloat16", "float16"]))
@flag(BarrierOptions, "seeds", help="Comma-separated: " + field_of(BarrierOptions, "seeds").metadata["help"])
@click.option("--decompose", is_flag=True, help="Also decompose each path: only one part interpolated, and only "
              "that part kept at A, per role, layer and layer × role (docs/workflows.md).")
@click.option("--decompose-points", default=5, show_default=True, type=click.IntRange(min=2),
              help="λ grid points of the decomposition (each part costs 2·(points − 1) evaluations).")
@click.option("--decompose-by", default="roles,layers,cells", show_default=True,
              help="Which groupings to decompose by (the heat map needs cells).")
@click.option("--decompose-plot", type=click.Path(dir_okay=False),
              help="With --decompose: write the layers × roles heat maps here.")
@mode_option
@precision_options(write=False)
@revision_option
@progress_option
def command(models, methods, points, json_path, csv_path, plot_path, resolution, samples, concentration, eval_dtype,
            old_dtype, seeds, decompose, decompose_points, decompose_by, decompose_plot, mode, progress,
            compute_dtype, revision, **kw):
    """Evaluate θ(λ) = (1−λ)·θ_A + λ·θ_B′ on a λ grid, where B′ is B after each alignment method, and report
    the paper's loss barrier, Git Re-Basin's mean-of-endpoints barrier and the accuracy drop.
    The data set, split and tokenizer come from A's glmc.json unless --data is given.
    With three or more models: the loss over the simplex Σλ_m·θ_m (a triangular grid for 3, sampled points
    beyond), the multi-model barrier max[L(Σλθ) − ΣλL(θ)], and a ternary heat map (the methods with simplex
    support, --align lists them, each aligning all models to a shared universe). Each alignment method takes the
    flags of its options class (as `glmc align`; --batch-size is the evaluation's, --train-batch-size a method's
    training)."""
    from glmc.experiments.barriers import format_decompositions, format_table, run_barriers, write_csv

    progress = progress and distributed.is_main()  # one set of progress bars under a launch
    align_options = take(kw, *option_classes(), skip=("mode", "progress"))
    data_kw = kw
    dtype = old_dtype or eval_dtype
    steps = align_options["steps"]

    if len(models) < 2:
        raise click.UsageError("give at least two models")
    method_list = parse_methods(methods, "--align", simplex=len(models) > 2)
    models = resolve_models(models, revision)
    for path, option in ((json_path, "--json"), (csv_path, "--csv")):
        if path:
            check_out_path(path, option, inputs=models)
    if plot_path:
        check_plot_path(plot_path, inputs=models)
    if decompose_plot:
        check_plot_path(decompose_plot, "--decompose-plot", inputs=models)
    if (decompose or decompose_plot) and (len(models) > 2 or mode == "circuit"):
        raise click.UsageError("--decompose works on two models in native mode")
    if decompose_plot and not decompose:
        raise click.UsageError("--decompose-plot needs --decompose")
    seed_list = _seeds(seeds)
    by = tuple(g.strip() for g in decompose_by.split(",") if g.strip())
    from glmc.paths.decompose import GROUPINGS

    if not by or any(g not in GROUPINGS for g in by):
        raise click.BadParameter(f"{decompose_by!r}: choose from {', '.join(GROUPINGS)}", param_hint="--decompose-by")
    if decompose_plot and "cells" not in by:
        raise click.UsageError("--decompose-plot draws the layers × roles cells: keep cells in --decompose-by")
    if plot_path and len(models) > 3:
        raise click.UsageError("--plot draws a ternary heat map for 3 models (or curves for 2); drop it for more")
    device = pick_device(data_kw.pop("device"))
    loaded = load_models(models, device, compute_dtype)
    ds, batches, data_info = load_eval_data(models[0], model=loaded[0], **data_kw)
    if len(models) > 2:
        return _simplex(models, loaded, ds, batches, data_info, method_list, resolution, samples, steps, progress,
                        json_path, plot_path, mode, concentration, dtype)
    model_a, model_b = loaded
    result = run_barriers(model_a, model_b, ds, batches, method_list, points=points, progress=progress,
                          align_options=align_options, mode=mode, dtype=dtype,
                          seeds=seed_list, decompose=decompose_points if decompose else None,
                          decompose_by=by)
    result.update({"schema": "glmc.barrier/1", "models": [str(m) for m in models], **data_info})
    from glmc.provenance import provenance

    result["provenance"] = provenance(
        options={"barrier": {"points": points, "mode": mode, "eval_dtype": dtype, "seeds": seed_list,
                             "compute_dtype": compute_dtype, **{k: data_kw.get(k) for k in ("split", "batch_size",
                                                                                               "max_batches")}},
                 "align": align_options, "methods": method_list},
        data={"spec": ds.spec, "batches": batches}, models=models, seeds=seed_list, device=device)
    click.echo(format_table(result))
    if decompose:
        click.echo("\n" + format_decompositions(result))
    if not distributed.is_main():  # every process has the same figures; the main one writes them
        return
    if json_path:
        write_json(json_path, result)
        click.echo(f"wrote {json_path}")
    if csv_path:
        write_csv(result, csv_path)
        click.echo(f"wrote {csv_path}")
    if plot_path:
        from glmc.experiments.plots import plot_curves

        curves = {m: r for m, r in result["results"].items()}
        plot_curves(curves, plot_path, title=f"{models[0]} ↔ {models[1]} ({data_info['split']})",
                    show_acc=True)
        click.echo(f"wrote {plot_path}")
    if decompose_plot:
        from glmc.experiments.plots import plot_decompositions

        plot_decompositions(result["results"], decompose_plot, title=f"{models[0]} ↔ {models[1]}: where the "
                            f"barrier lives ({data_info['split']})")
        click.echo(f"wrote {decompose_plot}")


def _seeds(text):
    if text is None:
        return None
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of integers", param_hint="--seeds") \
            from None
    if not seeds:
        raise click.BadParameter("give at least one seed", param_hint="--seeds")
    return seeds


def _simplex(paths, models, ds, batches, data_info, methods, resolution, samples, steps, progress, json_path,
             plot_path, mode, concentration=None, dtype=None):
    from glmc.api import barrier

    results = {}
    for method in methods:
        # a method that trains refines the universe on the simplex with the merge's training options
        options = {"steps": steps or MergeOptions.steps, "concentration": concentration} \
            if method_record(method).trains else {}
        s = barrier(models, data=ds, align=method, batches=batches, mode=mode, progress=progress,
                    resolution=resolution, samples=samples, eval_dtype=dtype, **options)
        results[method] = s.to_dict()
    click.echo(f"{'method':<10}{'barrier':>10}{'centre':>10}{'align s':>9}{'grid s':>9}   (k = {len(models)})")
    for method, r in results.items():
        click.echo(f"{method:<10}{r['barrier']:>10.4f}{r['centre_excess']:>10.4f}{r['align_seconds']:>9.1f}"
                   f"{r['surface_seconds']:>9.1f}")
    result = {"schema": "glmc.simplex/1", "models": [str(p) for p in paths], "task": ds.task, "mode": mode,
              "results": results, **data_info}
    if not distributed.is_main():
        return
    if json_path:
        write_json(json_path, result)
        click.echo(f"wrote {json_path}")
    if plot_path:
        if len(models) != 3:
            raise click.UsageError("--plot draws a ternary heat map: give exactly 3 models")
        from glmc.experiments.plots import plot_simplex

        plot_simplex(results, plot_path, title=f"loss excess over the simplex ({data_info['split']})")
        click.echo(f"wrote {plot_path}")
