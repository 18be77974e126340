"""`glmc train gpt2|vit`: train an endpoint and save it with its glmc.json record."""

from pathlib import Path

import click

BUDGET = ("steps", "epochs", "minutes")


def _common(f):
    """Options shared by both sub-commands; None means "take it from the preset"."""
    options = [
        click.option("--preset", default="cpu", show_default=True, help="Shape and budget defaults (see --help)."),
        click.option("--seed", default=0, show_default=True, type=int, help="Initialisation and data order."),
        click.option("--out", type=click.Path(file_okay=False), default=None,
                     help="Output directory [default: runs/<family>-<data>-seed<seed>]."),
        click.option("--overwrite", is_flag=True, help="Replace --out if it exists."),
        click.option("--layers", type=int), click.option("--width", type=int), click.option("--heads", type=int),
        click.option("--mlp", type=int, help="MLP hidden width."),
        click.option("--dropout", type=float),
        click.option("--steps", type=int, help="Budget: optimiser steps."),
        click.option("--epochs", type=float, help="Budget: passes over the training split."),
        click.option("--minutes", type=float, help="Budget: wall-clock minutes (not bit-reproducible)."),
        click.option("--batch-size", type=int), click.option("--lr", type=float, help="Peak learning rate."),
        click.option("--weight-decay", type=float), click.option("--warmup", type=int, help="Warmup steps."),
        click.option("--grad-clip", type=float, help="Max gradient norm (0: off)."),
        click.option("--eval-every", type=int, help="Validate every N steps."),
        click.option("--eval-batches", type=int, help="Validation batches per periodic check [all]."),
        click.option("--patience", type=int, help="Stop after N checks without improvement [never]."),
        click.option("--device", default="cpu", show_default=True,
                     help="cpu, cuda, cuda:N or auto (cuda when available). Metrics are recorded for this device."),
        click.option("--quiet", is_flag=True, help="No progress bar."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


@click.group("train")
def command():
    """Train independent endpoints (run twice with different --seed for an LMC pair)."""


@command.command("gpt2")
@click.option("--data", default="shakespeare", show_default=True, help="shakespeare or text:PATH.")
@click.option("--tokenizer", help="char, gpt2 or bpe:N [preset: char].")
@click.option("--context", type=int, help="Context length in tokens.")
@click.option("--tied/--untied", default=None, help="Tie the LM head to the embeddings [preset: cpu tied, paper untied].")
@click.option("--activation", type=click.Choice(["gelu_new", "gelu", "relu"]), default="gelu_new", show_default=True)
@_common
def gpt2(data, tokenizer, context, tied, activation, **opts):
    """HF GPT2LMHeadModel on text. Presets: cpu (4 layers, width 128, char, 1000 steps: ~4 min on 2 cores),
    paper-shakespeare (the paper's: 6 layers, width 256, 4 heads, MLP 1024, context 256, GPT-2 BPE, untied head,
    dropout 0.1, AdamW 3e-4)."""
    from glmc.train import GPT2_PRESETS

    p = _merge(GPT2_PRESETS, opts, tokenizer=tokenizer, context=context, tied=tied)
    shape = dict(layers=p["layers"], width=p["width"], heads=p["heads"], mlp=p["mlp"], dropout=p["dropout"],
                 tied=p["tied"], activation=activation)
    spec = {"source": data, "tokenizer": p["tokenizer"], "context": p["context"]}
    _run("gpt2", spec, shape, p, opts)


@command.command("vit")
@click.option("--data", default="mnist", show_default=True,
              help="mnist, fashion-mnist, digits, cifar10:DIR, cifar100:DIR or folder:DIR.")
@click.option("--family", type=click.Choice(["hf", "timm"]), default="hf", show_default=True)
@click.option("--patch", type=int, help="Patch size (must divide the image size).")
@click.option("--augment", type=click.Choice(["none", "crop-flip"]), help="[crop-flip for CIFAR, else none]")
@click.option("--activation", type=click.Choice(["gelu", "relu"]), default="gelu", show_default=True)
@_common
def vit(data, family, patch, augment, activation, **opts):
    """HF ViTForImageClassification (or timm VisionTransformer) on images. Presets: cpu (4 layers, width 128,
    patch 7, 3 epochs), paper-cifar (6 layers, width 256, 8 heads, MLP 512, patch 4)."""
    from glmc.train import VIT_PRESETS

    p = _merge(VIT_PRESETS, opts, patch=patch)
    shape = dict(layers=p["layers"], width=p["width"], heads=p["heads"], mlp=p["mlp"], dropout=p["dropout"],
                 activation=activation, patch=p["patch"])
    spec = {"source": data, **({"augment": augment} if augment else {})}
    _run(f"{family}-vit", spec, shape, p, opts, fit_patch=patch is None)


def _merge(presets: dict, opts: dict, **extra) -> dict:
    """Preset values, overridden by every option given; a budget given replaces the preset's whole budget."""
    if opts["preset"] not in presets:
        raise click.BadParameter(f"unknown preset {opts['preset']!r}; choose from {', '.join(presets)}",
                                 param_hint="--preset")
    merged = dict(presets[opts["preset"]])
    given = {k: v for k, v in {**opts, **extra}.items() if v is not None}
    if any(k in given for k in BUDGET):
        for k in BUDGET:
            merged.pop(k, None)
    merged.update(given)
    return merged


def _run(family, spec, shape, p, opts, fit_patch=False):
    from glmc.data.errors import DataUnavailable

    try:
        _train(family, spec, shape, p, opts, fit_patch)
    except (ValueError, FileNotFoundError, DataUnavailable) as e:  # bad input or missing data: no traceback
        raise click.ClickException(str(e))


def _train(family, spec, shape, p, opts, fit_patch):
    import glmc.data
    from glmc.train import TrainConfig, run

    spec = glmc.data.parse_spec(spec)
    if fit_patch:
        shape["patch"] = _fitting_patch(spec, shape["patch"])
    fields = TrainConfig.__dataclass_fields__
    cfg = TrainConfig(**{k: v for k, v in p.items() if k in fields})
    out = Path(opts["out"] or f"runs/{family}-{_short(spec['source'])}-seed{cfg.seed}")
    if out.exists() and not opts["overwrite"]:
        raise click.ClickException(f"{out} exists; pass --overwrite to replace it or choose another --out")
    log = (lambda *a: None) if opts["quiet"] else click.echo
    _, record = run(family, spec, shape, cfg, out=out, progress=not opts["quiet"], overwrite=True, log=log,
                    device=_device(opts["device"]))
    click.echo(summary(record, out))


def _device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise click.BadParameter("CUDA is not available on this machine", param_hint="--device")
    return device


def _fitting_patch(spec, patch: int) -> int:
    """The preset's patch, or the largest smaller one that divides the image size (8×8 digits, 32×32 CIFAR)."""
    import glmc.data

    size = glmc.data.load(spec).image_size
    fitted = max(d for d in range(1, min(patch, size) + 1) if size % d == 0)
    if fitted != patch:
        click.echo(f"patch {patch} does not divide image size {size}; using patch {fitted}")
    return fitted


def _short(source: str) -> str:
    kind, _, path = source.partition(":")
    return f"{kind}-{Path(path).stem}" if path else kind


def summary(record: dict, out) -> str:
    t, m, tr = record["timing"], record["metrics"], record["training"]
    rate = next(f"{v:,.0f} {k.split('_')[0]}/s" for k, v in t.items() if k.endswith("_per_second"))
    text = (f"{record['family']} seed {tr['seed']}: {tr['steps_done']} steps ({tr['stopped']}) in "
            f"{t['wall_seconds']:.0f}s, {rate} | test loss {m['test']['loss']:.4f} acc {m['test']['acc']:.4f}")
    if "baseline" in record:
        text += f" (unigram baseline {record['baseline']['unigram_test_loss']:.4f})"
    return text + f" | val loss {m['val']['loss']:.4f} | best step {tr['best_step']} | saved {out}"
