"""`glmc align A B --method … --out DIR`: write B′ = π(B), the transform and a report."""

import click

from glmc.commands.common import data_options, load_eval_data, load_models, pick_device, write_json


@click.command("align")
@click.argument("model_a", type=click.Path(exists=True, file_okay=False))
@click.argument("model_b", type=click.Path(exists=True, file_okay=False))
@click.option("--method", default="weight", show_default=True,
              type=click.Choice(["weight", "activation", "learned", "learned-perm"]))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for B′ (a standard checkpoint), transform.safetensors and align.json.")
@click.option("--iterations", default=15, show_default=True, help="Weight-matching iterations.")
@click.option("--residual", default="orthogonal", show_default=True, type=click.Choice(["orthogonal", "permutation"]),
              help="Residual symmetry for weight matching.")
@click.option("--no-head-maps", is_flag=True, help="Weight matching without the per-head invertible maps.")
@click.option("--batches", "act_batches", default=32, show_default=True,
              help="Activation matching: training batches to correlate.")
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists.")
@click.option("--progress/--no-progress", default=True, show_default=True)
@data_options
def command(model_a, model_b, method, out_dir, iterations, residual, no_head_maps, act_batches, overwrite, progress,
            **data_kw):
    """Find the symmetry transform π that brings MODEL_B next to MODEL_A and write π(B). π(B) computes exactly
    B's function (checked before writing: max |Δlogits| is reported); the inputs are only read."""
    import time
    from pathlib import Path

    from glmc.align import align
    from glmc.io import atomic_dir
    from glmc.models import read_record, save_model

    device = pick_device(data_kw.pop("device"))
    a, b = load_models([model_a, model_b], device)
    ds = None
    if method != "weight":
        ds, _, _ = load_eval_data(model_a, **data_kw)
    t0 = time.perf_counter()
    al = align(a, b, method, data=ds, iterations=iterations, residual=residual, head_maps=not no_head_maps,
               progress=progress, batches=act_batches)
    seconds = time.perf_counter() - t0
    report = {"schema": "glmc.align/1", "model_a": str(model_a), "model_b": str(model_b), "method": method,
              "seconds": seconds, **al.report}
    tokenizer = None
    if (Path(model_b) / "tokenizer.json").is_file():
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_b)
    record = read_record(model_b)
    if record is not None:
        record = {**record, "aligned": {"to": str(model_a), "method": method}}
    if Path(out_dir).exists() and not overwrite:
        raise click.ClickException(f"{out_dir} exists (pass --overwrite to replace it)")
    with atomic_dir(out_dir) as tmp:
        save_model(al.model_b.cpu(), tmp / "model", record=record, tokenizer=tokenizer)
        for f in (tmp / "model").iterdir():
            f.rename(tmp / f.name)
        (tmp / "model").rmdir()
        if al.transform is not None:
            al.transform.save(tmp / "transform.safetensors")
        write_json(tmp / "align.json", report)
    click.echo(f"aligned {model_b} to {model_a} with {method} matching in {seconds:.1f} s")
    click.echo(f"weight distance ‖A−B‖²/‖A‖²: {al.report['distance_before']:.4f} → {al.report['distance_after']:.4f}")
    click.echo(f"function check: max |Δlogits| B vs B′ {al.report['max_dlogits_b']:.2e}")
    click.echo(f"wrote {out_dir}/ (model, transform.safetensors, align.json)")
