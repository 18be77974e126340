"""`glmc train FAMILY`: train an endpoint and save it with its glmc.json record. The sub-commands, their presets
and their model options come from the adapter registry (Adapter.training: command, presets, options,
data_spec): a family that declares presets is trainable with no change here."""

from pathlib import Path

import click

from glmc.errors import GlmcError

BUDGET = ("steps", "epochs", "minutes")
COUNT, NATURAL = click.IntRange(min=1), click.IntRange(min=0)  # option value types: ≥ 1, ≥ 0
POSITIVE, NON_NEGATIVE = click.FloatRange(min=0, min_open=True), click.FloatRange(min=0)
FRACTION = click.FloatRange(min=0, max=1, min_open=True)


COMMON = ("preset", "seed", "out", "overwrite", "layers", "width", "heads", "mlp", "dropout", "steps", "epochs",
          "minutes", "batch_size", "lr", "weight_decay", "warmup", "grad_clip", "eval_every", "eval_batches",
          "patience", "save_every", "device", "quiet")


def _common(f):
    """Options every sub-command shares (COMMON); None means "take it from the preset"."""
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


class TrainCommands(click.Group):
    """One sub-command per `train_command` of the registered adapters (glmc.adapters.ADAPTERS), built when asked
    for, so `glmc --help` does not import the model libraries."""

    @property
    def commands(self) -> dict:
        """name -> sub-command, made on first use from the registry."""
        for name, adapters in _by_command().items():
            if name not in self._commands:
                self._commands[name] = _train_command(name, adapters)
        return self._commands

    @commands.setter
    def commands(self, value) -> None:
        self._commands = dict(value or {})

    def list_commands(self, ctx):
        return list(self.commands)

    def get_command(self, ctx, name):
        return self.commands.get(name)


@click.group("train", cls=TrainCommands)
def command():
    """Train independent endpoints (run twice with different --seed for an LMC pair)."""


def _by_command() -> dict:
    """train command name -> the adapter classes it trains (those with presets), in registry order."""
    from glmc.adapters import adapters

    out: dict = {}
    for cls in adapters():
        if cls.training.presets:
            out.setdefault(cls.training.command or cls.family, []).append(cls)
    return out


def _option(o):
    """The click option of an adapter's TrainOption declaration."""
    flag = "--" + o.name.replace("_", "-")
    if o.type == "switch":
        return click.option(f"{flag}/--{o.off}", o.name, default=None, help=o.help)
    types = {"count": COUNT, "int": click.IntRange(min=o.minimum), "text": str, "fraction": FRACTION}
    kind = click.Choice(list(o.choices)) if o.type == "choice" else types[o.type]
    return click.option(flag, o.name, type=kind, default=o.default, show_default=o.default is not None,
                        help=o.help or None)


def _train_command(name: str, classes: list):
    """`glmc train NAME`: the shared options, each adapter's own, and --family when several adapters share NAME."""
    first = classes[0]()
    variants = {cls.training.variant: cls for cls in classes}

    def train(data, family=None, **opts):
        from glmc.adapters import adapter_named

        adapter = adapter_named(variants[family].family if family else first.family)
        own = {o.name for o in adapter.training.options}
        extra = {k: opts.pop(k) for k in list(opts) if k not in COMMON}
        unknown = [k for k, v in extra.items() if k not in own and v is not None]
        if unknown:
            flag = "--" + unknown[0].replace("_", "-")
            raise click.BadParameter(f"--family {family} has no such option", param_hint=flag)
        _run(adapter, opts, dict(extra, data=data))

    options = [click.option("--data", default=first.training.data[0], show_default=True,
                                help=first.training.data[1])]
    if len(classes) > 1:
        options.append(click.option("--family", type=click.Choice(list(variants)), default=classes[0].training.variant,
                                    show_default=True))
    seen = set()
    for cls in classes:
        for o in cls().training.options:
            if o.name not in seen:
                seen.add(o.name)
                options.append(_option(o))
    f = train
    for option in reversed(options):
        f = option(f)
    return click.command(name, help=first.training.help)(_common(f))


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


def _run(adapter, opts, extra):
    from glmc.data.errors import DataUnavailable

    try:
        _train(adapter, opts, extra)
    except (ValueError, FileNotFoundError, DataUnavailable) as e:  # bad input or missing data: no traceback
        if isinstance(e, GlmcError):
            raise
        raise click.ClickException(str(e)) from None


def _train(adapter, opts, extra):
    import glmc.data
    from glmc.training.train import TrainConfig, run

    family = adapter.family
    log = (lambda *a: None) if opts["quiet"] else click.echo
    given = {k for k, v in {**opts, **extra}.items() if v is not None}
    p = _merge(adapter.training.presets, opts, **extra)
    spec = glmc.data.parse_spec(adapter.training.data_spec(p, given, click.echo))
    shape = {k: p[k] for k in adapter.training.model_options if k in p}
    fields = TrainConfig.__dataclass_fields__
    cfg = TrainConfig(**{k: v for k, v in p.items() if k in fields})
    out = Path(opts["out"] or f"runs/{family}-{_short(spec['source'])}-seed{cfg.seed}")
    if out.exists() and not opts["overwrite"]:
        raise click.ClickException(f"{out} exists; pass --overwrite to replace it or choose another --out")
    from glmc.cli.common import check_out_path, pick_device

    check_out_path(out, "--out", directory=True)  # not below a file, not a file: refused before training
    _, record = run(family, spec, shape, cfg, out=out, progress=not opts["quiet"], overwrite=True, log=log,
                    device=pick_device(opts["device"]))
    click.echo(summary(record, out))


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
