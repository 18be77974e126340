"""`glmc demo`: the main job end to end on the built-in Shakespeare text.

Trains two small GPT-2s that differ only in their seed (cached in --out: a later run reuses them), aligns the
second to the first with each method, prints the barrier table and writes the figure and JSON.

Two sizes. The default is a newcomer's first run, under 5 minutes on 2 CPU cores from a fresh clone (measured:
see the README): context 64, 500 training steps per model, learned matching for 150 steps, 10 test batches per
λ. `--full` is the README's results table: context 128, 600 steps, every method (learned-perm included) and
learned matching for 300 steps, about 15 minutes.
"""

import click

from glmc.cli.common import progress_option
from glmc.cli.flags import flag
from glmc.options import BarrierOptions, field_of

DEFAULT_FAMILY = "gpt2"


def demo_families() -> dict:
    """family -> (model shape, what the models are called): every registered adapter that declares a demo
    (Adapter.training: demo_shape, demo_label), trained on characters of Shakespeare."""
    from glmc.adapters import adapters

    return {cls.family: (cls.training.demo_shape, cls.training.demo_label) for cls in adapters()
            if cls.training.demo_shape}


class _Families(click.Choice):
    """The --family choice, read from the adapter registry only when the option is used (not for `glmc --help`)."""

    def __init__(self):
        super().__init__([])

    def convert(self, value, param, ctx):
        self.choices = list(demo_families())
        return super().convert(value, param, ctx)

    def get_metavar(self, param, ctx=None):
        return "FAMILY"
PRESETS = {
    "quick": dict(context=64, steps=500, learned_steps=150, max_batches=10, out="runs/demo",
                  methods=["none", "activation", "weight", "learned"]),
    "full": dict(context=128, steps=600, learned_steps=300, max_batches=20, out="runs/demo-full",
                 methods=["none", "activation", "weight", "learned-perm", "learned"]),
}
DEMO_TRAIN = dict(batch_size=32, lr=2e-3, warmup=60, eval_every=200, eval_batches=8)


def _train_or_reuse(out_dir, family, seed, steps, context, progress):
    import json

    from glmc.training.train import TrainConfig, run

    record = out_dir / "glmc.json"
    shape = demo_families()[family][0]
    wanted = {"seed": seed, "steps": steps, "shape": shape, "context": context}
    if record.is_file() and json.loads(record.read_text()).get("demo") == wanted:
        click.echo(f"reusing {out_dir} (trained earlier with the same settings)")
        return
    click.echo(f"training {out_dir} (seed {seed}, {steps} steps)…")
    cfg = TrainConfig(seed=seed, **{**DEMO_TRAIN, "steps": steps})
    from glmc.adapters import adapter_named

    data = adapter_named(family).training.demo_data(context)
    _, rec = run(family, data, shape, cfg, out=out_dir, progress=progress, overwrite=True,
                 log=lambda msg: None)
    rec["demo"] = wanted
    from glmc.cli.common import write_json

    write_json(record, rec)
    m = rec.get("metrics", {}).get("test", {})
    click.echo(f"  test loss {m.get('loss', float('nan')):.4f}, {rec['timing']['wall_seconds']:.0f} s")


@click.command("demo")
@click.option("--family", default=DEFAULT_FAMILY, show_default=True, type=_Families(),
              help="A family that declares a demo: gpt2 (HF GPT-2), llama (grouped-query attention), neox (GPT-NeoX, "
              "parallel attention and MLP, partial rotary), ….")
@click.option("--full", is_flag=True, help="The README's table: larger context, longer training, every method "
              "(about 15 minutes on 2 cores) instead of the quick first run (under 5).")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Where the two models, the table, JSON and figure go (models are reused if present) "
                   "[runs/demo; with --full runs/demo-full; --family llama: runs/demo-llama(-full)].")
@click.option("--steps", default=None, type=click.IntRange(min=1),
              help="Training steps per model [500; with --full 600].")
@click.option("--methods", default=None, help="Alignment methods [none, activation, weight, learned; with --full "
              "learned-perm too].")
@flag(BarrierOptions, "max_batches", help=field_of(BarrierOptions, "max_batches").metadata["help"] +
      " [the preset's: 10; with --full 20]")
@progress_option
def command(family, full, out_dir, steps, methods, max_batches, progress):
    """Train two GPT-2s (or Llama decoders) on Shakespeare (seeds 0 and 1), align them with each method and
    print the barriers."""
    import time
    from pathlib import Path

    import torch

    from glmc.cli.common import check_out_path, load_eval_data, load_models, parse_methods, pick_device, write_json
    from glmc.experiments.barriers import format_table, run_barriers, write_csv
    from glmc.experiments.plots import plot_curves

    t0 = time.perf_counter()
    preset = PRESETS["full" if full else "quick"]
    default_out = preset["out"] if family == DEFAULT_FAMILY else preset["out"].replace("demo", f"demo-{family}")
    out = Path(out_dir or default_out)
    steps = steps or preset["steps"]
    max_batches = max_batches or preset["max_batches"]
    chosen = (parse_methods(methods, "--methods") if methods  # before minutes of training
              else preset["methods"])
    check_out_path(out, "--out", directory=True)
    for seed in (0, 1):
        _train_or_reuse(out / f"{family}-seed{seed}", family, seed, steps, preset["context"], progress)
    device = pick_device("auto")
    paths = [out / f"{family}-seed0", out / f"{family}-seed1"]
    a, b = load_models(paths, device)
    ds, batches, info = load_eval_data(paths[0], max_batches=max_batches)
    torch.manual_seed(0)
    result = run_barriers(a, b, ds, batches, chosen, progress=progress,
                          align_options={"steps": preset["learned_steps"]})
    result.update({"schema": "glmc.barrier/1", "models": [str(p) for p in paths], **info,
                   "demo": {"preset": "full" if full else "quick", "family": family, "training_steps": steps,
                            "learned_steps": preset["learned_steps"], "context": preset["context"]}})
    from glmc.provenance import provenance

    result["provenance"] = provenance(options={"demo": result["demo"], "methods": chosen, "max_batches": max_batches},
                                      data={"spec": ds.spec, "batches": batches}, models=paths, seeds=[0, 1],
                                      device=device)
    click.echo("")
    click.echo(f"Loss barriers between two {demo_families()[family][1]} trained on Shakespeare from seeds 0 and 1 "
               f"({info['n_batches']} test batches, 11 points):")
    click.echo(format_table(result))
    write_json(out / "barriers.json", result)
    write_csv(result, out / "barriers.csv")
    plot_curves(result["results"], out / "barriers.png", title=f"{family} / Shakespeare, seeds 0 ↔ 1")
    click.echo(f"figure: {out / 'barriers.png'}")
    click.echo(f"JSON: {out / 'barriers.json'}  CSV: {out / 'barriers.csv'}  models: {paths[0]}, {paths[1]}")
    click.echo(f"done in {time.perf_counter() - t0:.0f} s" + ("" if full else " (glmc demo --full: the README's "
                                                                           "table, about 15 minutes)"))
