"""`glmc demo`: the main job end to end on the built-in Shakespeare text.

Trains two small GPT-2s that differ only in their seed (cached in --out: a later run reuses them), aligns the
second to the first with every available method, prints the barrier table and writes the figure and JSON.
"""

import click

# Small enough for a few minutes per model on 2 CPU cores, large enough to show a clear vanilla barrier.
DEMO_SHAPE = dict(layers=4, width=128, heads=4, mlp=512, dropout=0.0, tied=True, activation="gelu_new")
DEMO_TRAIN = dict(steps=600, batch_size=32, lr=2e-3, warmup=60, eval_every=200, eval_batches=8)
DEMO_DATA = {"source": "shakespeare", "tokenizer": "char", "context": 128}


def _train_or_reuse(out_dir, seed, steps, progress):
    import json

    from glmc.training.train import TrainConfig, run

    record = out_dir / "glmc.json"
    wanted = {"seed": seed, "steps": steps, "shape": DEMO_SHAPE}
    if record.is_file() and json.loads(record.read_text()).get("demo") == wanted:
        click.echo(f"reusing {out_dir} (trained earlier with the same settings)")
        return
    click.echo(f"training {out_dir} (seed {seed}, {steps} steps)…")
    cfg = TrainConfig(seed=seed, **{**DEMO_TRAIN, "steps": steps})
    _, rec = run("gpt2", DEMO_DATA, DEMO_SHAPE, cfg, out=out_dir, progress=progress, overwrite=True,
                 log=lambda msg: None)
    rec["demo"] = wanted
    from glmc.cli.common import write_json

    write_json(record, rec)
    m = rec.get("metrics", {}).get("test", {})
    click.echo(f"  test loss {m.get('loss', float('nan')):.4f}, {rec['timing']['wall_seconds']:.0f} s")


@click.command("demo")
@click.option("--out", "out_dir", default="runs/demo", show_default=True, type=click.Path(file_okay=False),
              help="Where the two models, the table, JSON and figure go (models are reused if present).")
@click.option("--steps", default=DEMO_TRAIN["steps"], show_default=True, type=click.IntRange(min=1),
              help="Training steps per model.")
@click.option("--methods", default=None, help="Alignment methods [all available: none, activation, weight, …].")
@click.option("--max-batches", default=20, show_default=True, type=click.IntRange(min=1),
              help="Test batches per λ point.")
@click.option("--progress/--no-progress", default=True, show_default=True)
def command(out_dir, steps, methods, max_batches, progress):
    """Train two GPT-2s on Shakespeare (seeds 0 and 1), align them with each method and print the barriers."""
    from pathlib import Path

    import torch

    from glmc.matching import available_methods
    from glmc.cli.common import (check_out_path, load_eval_data, load_models, parse_methods, pick_device,
                                      write_json)
    from glmc.experiments.barriers import format_table, run_barriers, write_csv
    from glmc.experiments.plots import plot_curves

    out = Path(out_dir)
    chosen = parse_methods(methods, "--methods") if methods else None  # before minutes of training
    check_out_path(out, "--out", directory=True)
    for seed in (0, 1):
        _train_or_reuse(out / f"gpt2-seed{seed}", seed, steps, progress)
    order = ["none", "activation", "weight", "learned-perm", "learned"]
    chosen = chosen or [m for m in order if m in available_methods()]
    device = pick_device("auto")
    paths = [out / "gpt2-seed0", out / "gpt2-seed1"]
    a, b = load_models(paths, device)
    ds, batches, info = load_eval_data(paths[0], max_batches=max_batches)
    torch.manual_seed(0)
    result = run_barriers(a, b, ds, batches, chosen, progress=progress)
    result.update({"schema": "glmc.barrier/1", "models": [str(p) for p in paths], **info})
    click.echo("")
    click.echo(f"Loss barriers between two GPT-2s trained on Shakespeare from seeds 0 and 1 "
               f"({info['n_batches']} test batches, 11 points):")
    click.echo(format_table(result))
    write_json(out / "barriers.json", result)
    write_csv(result, out / "barriers.csv")
    plot_curves(result["results"], out / "barriers.png", title="GPT-2 / Shakespeare, seeds 0 ↔ 1")
    click.echo(f"wrote {out / 'barriers.json'}, {out / 'barriers.csv'}, {out / 'barriers.png'}")
