"""`glmc barrier A B [C …]`: loss and accuracy along the path between models, per alignment method."""

import click

from glmc.commands.common import data_options, load_eval_data, load_models, pick_device, write_json


@click.command("barrier")
@click.argument("models", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--align", "methods", default="none", show_default=True,
              help="Comma-separated alignment methods: none, weight, activation, learned, learned-perm.")
@click.option("--points", default=11, show_default=True, help="λ grid points, endpoints included.")
@data_options
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write all results as JSON here.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Write the per-λ curves as CSV here.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write the loss/accuracy figure here.")
@click.option("--iterations", default=15, show_default=True, help="Weight-matching iterations.")
@click.option("--progress/--no-progress", default=True, show_default=True)
def command(models, methods, points, json_path, csv_path, plot_path, iterations, progress, **data_kw):
    """Evaluate θ(λ) = (1−λ)·θ_A + λ·θ_B′ on a λ grid, where B′ is B after each alignment method, and report
    the paper's loss barrier, Git Re-Basin's mean-of-endpoints barrier and the accuracy drop.
    The data set, split and tokenizer come from A's glmc.json unless --data is given."""
    from glmc.experiment import run_barriers, format_table, write_csv

    if len(models) != 2:
        raise click.UsageError("give exactly two models (simplex barriers over more models come with `merge`)")
    device = pick_device(data_kw.pop("device"))
    model_a, model_b = load_models(models, device)
    ds, batches, data_info = load_eval_data(models[0], **data_kw)
    result = run_barriers(model_a, model_b, ds, batches, [m.strip() for m in methods.split(",") if m.strip()],
                          points=points, progress=progress, align_options={"iterations": iterations})
    result.update({"schema": "glmc.barrier/1", "models": [str(m) for m in models], **data_info})
    click.echo(format_table(result))
    if json_path:
        write_json(json_path, result)
        click.echo(f"wrote {json_path}")
    if csv_path:
        write_csv(result, csv_path)
        click.echo(f"wrote {csv_path}")
    if plot_path:
        from glmc.plots import plot_curves

        curves = {m: r for m, r in result["results"].items()}
        plot_curves(curves, plot_path, title=f"{models[0]} ↔ {models[1]} ({data_info['split']})",
                    show_acc=True)
        click.echo(f"wrote {plot_path}")
