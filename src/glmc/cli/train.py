"""`glmc train gpt2|llama|vit`: train an endpoint and save it with its glmc.json record."""

from pathlib import Path

import click

BUDGET = ("steps", "epochs", "minutes")
COUNT, NATURAL = click.IntRange(min=1), click.IntRange(min=0)  # option value types: ≥ 1, ≥ 0
POSITIVE, NON_NEGATIVE = click.FloatRange(min=0, min_open=True), click.FloatRange(min=0)
VIT_FAMILIES = {"hf": "hf-vit", "timm": "timm-vit"}  # --family of `glmc train vit` -> adapter name


def _common(f):
    """Options shared by both sub-commands; None means "take it from the preset"."""
    options = [
        click.option("--preset", default="cpu", show_default=True, help="Shape and budget defaults (see --help)."),
        click.option("--seed", default=0, show_default=True, type=int, help="Initialisation and data order."),
        click.option("--out", type=click.Path(file_okay=False), default=None,
                     help="Output directory [default: runs/<family>-<data>-seed<seed>]."),
        click.option("--overwrite", is_flag=True, help="Replace --out if it exists."),
        click.option("--layers", type=COUNT), click.option("--width", type=COUNT), click.option("--heads", type=COUNT),
        click.option("--mlp", type=COUNT, help="MLP hidden width."),
        click.option("--dropout", type=click.FloatRange(min=0, max=1, max_open=True)),
        click.option("--steps", type=COUNT, help="Budget: optimiser steps."),
        click.option("--epochs", type=POSITIVE, help="Budget: passes over the training split."),
        click.option("--minutes", type=POSITIVE, help="Budget: wall-clock minutes (not bit-reproducible)."),
        click.option("--batch-size", type=COUNT), click.option("--lr", type=POSITIVE, help="Peak learning rate."),
        click.option("--weight-decay", type=NON_NEGATIVE), click.option("--warmup", type=NATURAL, help="Warmup steps."),
        click.option("--grad-clip", type=NON_NEGATIVE, help="Max gradient norm (0: off)."),
        click.option("--eval-every", type=COUNT, help="Validate every N steps."),
        click.option("--eval-batches", type=COUNT, help="Validation batches per periodic check [all]."),
        click.option("--patience", type=COUNT, help="Stop after N checks without improvement [never]."),
        click.option("--save-every", type=COUNT, help="Also keep the weights every N steps: OUT/checkpoints/stepN/."),
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
@click.option("--data", default="shakespeare", show_default=True,
              help="shakespeare, python-stdlib (a code corpus) or text:PATH.")
@click.option("--tokenizer", help="char, gpt2 or bpe:N [preset: char].")
@click.option("--context", type=COUNT, help="Context length in tokens.")
@click.option("--tied/--untied", default=None,
              help="Tie the LM head to the embeddings [preset: cpu tied, paper untied].")
@click.option("--activation", type=click.Choice(["gelu_new", "gelu", "relu"]), default="gelu_new", show_default=True)
@_common
def gpt2(data, tokenizer, context, tied, activation, **opts):
    """HF GPT2LMHeadModel on text. Presets: cpu (4 layers, width 128, char, 1000 steps: ~4 min on 2 cores),
    paper-shakespeare (the paper's: 6 layers, width 256, 4 heads, MLP 1024, context 256, GPT-2 BPE, untied head,
    dropout 0.1, AdamW 3e-4)."""
    from glmc.adapters import adapter_named

    adapter = adapter_named("gpt2")
    p = _merge(adapter.presets, opts, tokenizer=tokenizer, context=context, tied=tied, activation=activation)
    spec = {"source": data, "tokenizer": p["tokenizer"], "context": p["context"]}
    _run(adapter, spec, p, opts)


@command.command("llama")
@click.option("--data", default="shakespeare", show_default=True,
              help="shakespeare, python-stdlib (a code corpus) or text:PATH.")
@click.option("--tokenizer", help="char, gpt2 or bpe:N [preset: char].")
@click.option("--context", type=COUNT, help="Context length in tokens.")
@click.option("--kv-heads", type=COUNT, help="Key/value heads (grouped-query attention; must divide --heads).")
@click.option("--head-dim", type=click.IntRange(min=2), help="Head size, even (RoPE pairs) [width / heads]; a "
              "narrower model that keeps the wide one's head size can be aligned to it (narrow → wide).")
@click.option("--tied/--untied", default=None, help="Tie the LM head to the embeddings [preset: untied].")
@_common
def llama(data, tokenizer, context, kv_heads, head_dim, tied, **opts):
    """A Llama-family decoder (RMSNorm, RoPE, SwiGLU, grouped-query attention) on text. Preset: cpu (4 layers,
    width 128, 4 query heads sharing 2 key/value heads, SwiGLU 344 units, untied, char tokenizer)."""
    from glmc.adapters import adapter_named

    adapter = adapter_named("llama")
    p = _merge(adapter.presets, opts, tokenizer=tokenizer, context=context, kv_heads=kv_heads, head_dim=head_dim,
               tied=tied)
    spec = {"source": data, "tokenizer": p["tokenizer"], "context": p["context"]}
    _run(adapter, spec, p, opts)


@command.command("vit")
@click.option("--data", default="mnist", show_default=True,
              help="mnist, fashion-mnist, digits, cifar10:DIR, cifar100:DIR or folder:DIR.")
@click.option("--family", type=click.Choice(["hf", "timm"]), default="hf", show_default=True)
@click.option("--patch", type=COUNT, help="Patch size (must divide the image size).")
@click.option("--augment", type=click.Choice(["none", "crop-flip"]), help="[crop-flip for CIFAR, else none]")
@click.option("--activation", type=click.Choice(["gelu", "relu"]), default="gelu", show_default=True)
@click.option("--pool", type=click.Choice(["cls", "avg"]),
              help="What the head reads: the class token, or the mean of the patch tokens (timm only) [cls].")
@_common
def vit(data, family, patch, augment, activation, pool, **opts):
    """HF ViTForImageClassification (or timm VisionTransformer) on images. Presets: cpu (4 layers, width 128,
    patch 7, 3 epochs), paper-cifar (6 layers, width 256, 8 heads, MLP 512, patch 4)."""
    from glmc.adapters import adapter_named

    adapter = adapter_named(VIT_FAMILIES[family])
    if pool == "avg" and "pool" not in adapter.model_options:
        raise click.BadParameter(f"--family {family} pools the class token only; use --family timm for average "
                                 "pooling", param_hint="--pool")
    p = _merge(adapter.presets, opts, patch=patch, activation=activation,
               pool={"cls": "token", "avg": "avg"}.get(pool) if "pool" in adapter.model_options else None)
    spec = {"source": data, **({"augment": augment} if augment else {})}
    _run(adapter, spec, p, opts, fit_patch=patch is None)


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


def _run(adapter, spec, p, opts, fit_patch=False):
    from glmc.data.errors import DataUnavailable

    try:
        _train(adapter, spec, p, opts, fit_patch)
    except (ValueError, FileNotFoundError, DataUnavailable) as e:  # bad input or missing data: no traceback
        raise click.ClickException(str(e)) from None


def _train(adapter, spec, p, opts, fit_patch):
    import glmc.data
    from glmc.training.train import TrainConfig, run

    family = adapter.family
    shape = {k: p[k] for k in adapter.model_options if k in p}
    spec = glmc.data.parse_spec(spec)
    if fit_patch:
        shape["patch"] = _fitting_patch(spec, shape["patch"])
    fields = TrainConfig.__dataclass_fields__
    cfg = TrainConfig(**{k: v for k, v in p.items() if k in fields})
    out = Path(opts["out"] or f"runs/{family}-{_short(spec['source'])}-seed{cfg.seed}")
    if out.exists() and not opts["overwrite"]:
        raise click.ClickException(f"{out} exists; pass --overwrite to replace it or choose another --out")
    from glmc.cli.common import check_out_path

    check_out_path(out, "--out", directory=True)  # not below a file, not a file: refused before training
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
