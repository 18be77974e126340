"""`glmc align A B --method … --out DIR`: write B′ = π(B), the transform and a report."""

import time

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
from glmc.methods import method, names, option_classes, summary_lines


@click.command("align")
@click.argument("model_a", type=MODEL)
@click.argument("model_b", type=MODEL)
@click.option("--method", "method_name", default="weight", show_default=True, type=click.Choice(names(aligns=True)),
              help=f"{summary_lines(names(aligns=True))}.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for B′ (a standard checkpoint), transform.safetensors and align.json.")
@method_flags(*option_classes(), skip=("batch_size",))
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists.")
@precision_options()
@revision_option
@data_options
def command(model_a, model_b, method_name, out_dir, overwrite, compute_dtype, out_dtype, max_shard_size, revision,
            **kw):
    """Find the symmetry transform π that brings MODEL_B next to MODEL_A and write π(B). π(B) computes exactly
    B's function (checked before writing: max |Δlogits| is reported); the inputs are only read. If the models
    differ in width, the narrower one is embedded exactly into the wider architecture and aligned to the wider
    one (which stays fixed), and that is what is written. Each method takes the flags of its options class
    (glmc.WeightOptions, ActivationOptions, LearnedOptions, or a plugin's) and ignores the others'."""
    from glmc.api import align
    from glmc.matching import method_options

    record = method(method_name)
    options = take(kw, *option_classes())
    data_kw = kw
    options["progress"] = options["progress"] and distributed.is_main()  # one set of progress bars under a launch
    mode = options["mode"]

    model_a, model_b = resolve_models([model_a, model_b], revision)
    check_out_path(out_dir, "--out", overwrite, directory=True, inputs=(model_a, model_b))
    device = pick_device(data_kw.pop("device"))
    a, b = load_models([model_a, model_b], device, compute_dtype)
    ds = None
    options = method_options(record.name, options)
    if record.data == "required":
        ds, _, _ = load_eval_data(model_a, model=a, **data_kw)
    elif record.needs_data(a, options):  # e.g. weight matching's seen tokens, or its choice among candidates
        ds = _training_tokens(model_a, a, data_kw)
    t0 = time.perf_counter()
    al = align(a, b, record.name, data=ds, compute_dtype=compute_dtype,
               dtype=None if out_dtype == "auto" else out_dtype, **options)
    seconds = time.perf_counter() - t0
    al.report["seconds"] = seconds
    if ds is not None and isinstance(getattr(ds, "spec", None), dict):
        al.report["data"] = ds.spec  # with its split rule, like every result
    if distributed.is_main():  # every process holds the same result; the main one writes it
        al.save(out_dir, overwrite=True, mode=mode, max_shard_size=max_shard_size)
    target, ref = (model_b, model_a) if al.moved == "B" else (model_a, model_b)
    if "widened" in al.report:
        click.echo(f"embedded {target} exactly into the width of {ref} (max |Δlogits| "
                   f"{al.report['widened']['embedding_max_dlogits']:.2e}; with the wide model's LayerNorm eps "
                   f"{al.report['widened']['eps_effect_max_dlogits']:.2e})")
    if al.fill:
        click.echo(f"null space ({al.report['null_space']}): {len(al.fill)} tensors of free reader weights filled "
                   "toward the wide model (exact; null_space_fill.safetensors)")
    click.echo(f"aligned {target} to {ref} with {record.name} matching in {seconds:.1f} s")
    if "select" in al.report:
        losses = ", ".join(f"{c['name']} {c['midpoint_loss']:.4f}" for c in al.report["select"]["candidates"])
        click.echo(f"kept {al.report['chosen']}: the lowest midpoint loss on {al.report['select']['batches']} "
                   f"training batches ({losses})")
    click.echo(f"weight distance ‖A−B‖²/‖A‖²: {al.report['distance_before']:.4f} → {al.report['distance_after']:.4f}")
    click.echo(f"function check: max |Δlogits| of the moved model before/after {al.report['max_dlogits_b']:.2e}")
    if rounding_line(al.report):
        click.echo(rounding_line(al.report))
    click.echo(f"wrote {out_dir}/ (model, transform.safetensors, align.json)")


def _training_tokens(model_dir, model, data_kw):
    """The data whose training split tells the paper's residual fit which embedding rows were trained: the
    given --data (its errors are reported), or the model's own (glmc.json); without either, every row takes part
    (align.json's seen_token_rows says which)."""
    try:
        return load_eval_data(model_dir, model=model, **data_kw)[0]
    except click.ClickException:
        if data_kw.get("data") is not None:
            raise
        return None
