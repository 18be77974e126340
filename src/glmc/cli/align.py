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
    mode_option,
    pick_device,
    precision_options,
    resolve_models,
    revision_option,
    rounding_line,
)

POSITIVE = click.FloatRange(min=0, min_open=True)


@click.command("align")
@click.argument("model_a", type=MODEL)
@click.argument("model_b", type=MODEL)
@click.option("--method", default="weight", show_default=True,
              type=click.Choice(["weight", "activation", "learned", "learned-perm"]))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for B′ (a standard checkpoint), transform.safetensors and align.json.")
@click.option("--iterations", default=15, show_default=True, type=click.IntRange(min=1),
              help="Weight-matching iterations (at most).")
@click.option("--tol", default=3e-3, show_default=True, type=click.FloatRange(min=0),
              help="Weight matching stops when an iteration lowers the weight distance by less than this fraction.")
@click.option("--residual", default="orthogonal", show_default=True, type=click.Choice(["orthogonal", "permutation"]),
              help="Residual symmetry for weight and activation matching (activation: permutation is the "
                   "correlation baseline of Verma & Elbayad; orthogonal fits the residual group's map in least "
                   "squares, measured better in benchmarks/README.md).")
@click.option("--no-head-maps", is_flag=True, help="Weight matching without the per-head invertible maps.")
@click.option("--restarts", default=None, type=click.IntRange(1, 3),
              help="Weight matching: alternate from this many first residual maps and keep the closest result "
                   "[2 up to 2^25 parameters, else 1: twice the time; benchmarks/README.md]. Learned matching: "
                   "its weight-matching start's [1].")
@click.option("--algorithm", default="auto", show_default=True, type=click.Choice(["auto", "glmc", "paper"]),
              help="Weight matching: glmc's alternation, or the paper's (its costs, residual blocks and 15 iterations; "
                   "glmc/matching/paper.py; in native mode followed by per-head maps) [auto: the best of "
                   "--candidates (--select-batches) when it applies; else paper with --mode circuit, the family's "
                   "in native mode (GPT-2: paper up to 2^25 parameters), glmc when --restarts is given].")
@click.option("--select-batches", default=None, type=click.IntRange(min=0),
              help="Weight matching: run several alternations (--candidates) and keep the one whose path midpoint "
                   "has the lowest loss on this many training batches [4 up to 2^25 parameters with --algorithm "
                   "auto when the models' data is known; 0: off; glmc/matching/select.py].")
@click.option("--candidates", default=None,
              help="Weight matching: the alternations --select-batches chooses among, comma-separated "
                   "(glmc, paper, glmc-l1, glmc-unweighted) [all four; paper not for grouped-query models].")
@click.option("--batches", "act_batches", default=32, show_default=True, type=click.IntRange(min=1),
              help="Activation matching: training batches to correlate.")
@click.option("--steps", default=None, type=click.IntRange(min=1),
              help="Learned matching: optimiser steps [300; on 2 CPU cores about 0.2–0.5 min for small ViTs, 1–3 min "
              "for small-vocabulary GPT-2s, 8 min with a 50k vocabulary].")
@click.option("--epochs", default=None, type=POSITIVE, help="Learned matching: passes over the training split.")
@click.option("--minutes", default=None, type=POSITIVE,
              help="Learned matching: wall-clock budget in minutes (instead of --steps).")
@click.option("--lr", default=2e-2, show_default=True, type=POSITIVE,
              help="Learned matching: peak learning rate (AdamW; chosen on the tuning pairs, decision D6 of the docs).")
@click.option("--perm-lr", default=None, type=click.FloatRange(min=0),
              help="Learned matching: learning rate of the permutation latents (straight-through) [learned: 0, "
                   "weight matching's permutations kept; learned-perm: 0.02].")
@click.option("--sampler", default=None, type=click.Choice(["narrow", "uniform", "fixed", "gaussian"]),
              help="Learned matching: λ sampler [narrow: U(0.4, 0.6); uniform: U(0, 1) for models of different "
                   "widths].")
@click.option("--null-space", default=None, type=click.Choice(["learned", "fixed", "off"]),
              help="Models of different widths: the embedded model's free reader weights (exact either way) "
                   "[learned: trained with learned matching; fixed: the wide model's; off: zero].")
@click.option("--autocast", default=None, type=click.Choice(["bfloat16", "float16"]),
              help="Learned matching: run the training steps' forward and backward in this precision (the latents, "
                   "validation and the result stay float32). For GPUs: CPUs without bfloat16 units run it slower.")
@click.option("--checkpoint", is_flag=True,
              help="Learned matching: gradient checkpointing (each block's activations are recomputed during "
                   "backward instead of kept: less memory for about a third more compute).")
@click.option("--soft", is_flag=True, help="Learned matching: Sinkhorn soft permutations (rounded at the end).")
@click.option("--eval-every", default=50, show_default=True, type=click.IntRange(min=1),
              help="Learned matching: validate every N steps.")
@click.option("--patience", default=None, type=click.IntRange(min=1),
              help="Learned matching: early stopping after N checks.")
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists.")
@mode_option
@precision_options()
@revision_option
@click.option("--progress/--no-progress", default=True, show_default=True)
@data_options
def command(model_a, model_b, method, out_dir, iterations, tol, residual, no_head_maps, restarts, algorithm,
            select_batches, candidates, act_batches, steps, epochs, minutes, lr, perm_lr, sampler, null_space,
            autocast, checkpoint, soft, eval_every, patience, mode, overwrite, progress, compute_dtype, out_dtype,
            max_shard_size, revision, **data_kw):
    """Find the symmetry transform π that brings MODEL_B next to MODEL_A and write π(B). π(B) computes exactly
    B's function (checked before writing: max |Δlogits| is reported); the inputs are only read. If the models
    differ in width, the narrower one is embedded exactly into the wider architecture and aligned to the wider
    one (which stays fixed), and that is what is written."""
    from glmc.api import align
    from glmc.matching import method_options
    from glmc.matching.weight import wants_data

    progress = progress and distributed.is_main()  # one set of progress bars under a launch

    model_a, model_b = resolve_models([model_a, model_b], revision)
    check_out_path(out_dir, "--out", overwrite, directory=True, inputs=(model_a, model_b))
    device = pick_device(data_kw.pop("device"))
    a, b = load_models([model_a, model_b], device, compute_dtype)
    ds = None
    if method != "weight":
        ds, _, _ = load_eval_data(model_a, model=a, **data_kw)
    elif wants_data(a, mode, algorithm, restarts=restarts, tol=tol, select_batches=select_batches,
                    candidates=candidates):
        ds = _training_tokens(model_a, a, data_kw)
    options = dict(data=ds, iterations=iterations, tol=tol, residual=residual, head_maps=not no_head_maps,
                   restarts=restarts, algorithm=algorithm, select_batches=select_batches, candidates=candidates,
                   progress=progress, batches=act_batches, steps=steps, epochs=epochs, minutes=minutes,
                   lr=lr, perm_lr=perm_lr, sampler=sampler, null_space=null_space, autocast=autocast,
                   checkpoint=checkpoint, soft=soft, eval_every=eval_every, patience=patience, mode=mode)
    options = method_options(method, options)
    options.pop("data", None)
    t0 = time.perf_counter()
    al = align(a, b, method, data=ds, compute_dtype=compute_dtype, dtype=None if out_dtype == "auto" else out_dtype,
               **options)
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
    click.echo(f"aligned {target} to {ref} with {method} matching in {seconds:.1f} s")
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
