"""`glmc verify MODEL_DIR`: prove on this checkpoint that every symmetry class keeps the function."""

import sys

import click

from glmc.cli.common import MODEL, resolve_models, revision_option


@click.command("verify")
@click.argument("model_dir", type=MODEL)
@click.option("--tol", default=1e-4, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Largest allowed max |Δlogits| and |Δloss|.")
@click.option("--seed", default=0, show_default=True, help="Seed for the random group elements and inputs.")
@click.option("--classes", default=None, help="Comma-separated subset of classes (default: all the model admits).")
@revision_option
def command(model_dir, tol, seed, classes, revision):
    """Canonicalise MODEL_DIR, apply random elements of every symmetry class it admits (alone and composed)
    and report max |Δlogits| and |Δloss|. Exits 1 if any exceeds --tol. The checkpoint is only read."""
    import torch

    from glmc.adapters import UnsupportedModel, adapter_for
    from glmc.invariance import verify_model
    from glmc.models.checkpoint import load_checked

    (model_dir,) = resolve_models([model_dir], revision)
    model, _ = load_checked(model_dir)  # a bad or unsupported checkpoint: a GlmcError, one line from the CLI
    stored = str(next(model.parameters()).dtype).removeprefix("torch.")
    model = model.float()  # bfloat16 / float16 weights: checked on their exact values, computed in float32
    try:
        arch = adapter_for(model).arch(model)
        chosen = _parse_classes(classes, arch) if classes is not None else None
        with torch.no_grad():  # not set_grad_enabled: the CLI may run in-process (tests, notebooks)
            checks = verify_model(model, seed=seed, tol=tol, classes=chosen)
    except UnsupportedModel as e:
        raise click.ClickException(f"cannot transform {model_dir} exactly: {e}") from None
    click.echo(f"{model_dir}: {arch.family}, {arch.n_layer} layers, d_model {arch.d_model}, {arch.n_head} heads, "
               f"MLP {arch.d_mlp} ({arch.activation}); stored in {stored}, checked in float32")
    click.echo(f"{'class':<20}{'max |Δlogits|':>15}{'|Δloss|':>12}{'seconds':>9}  ok")
    for c in checks:
        click.echo(f"{c.name:<20}{c.max_dlogits:>15.2e}{c.dloss:>12.2e}{c.seconds:>9.2f}  {'yes' if c.ok else 'NO'}")
    for name, why in arch.unsupported.items():
        click.echo(f"{name:<20}{'skipped':>15}  not exact for this model: {why}")
    bad = [c.name for c in checks if not c.ok]
    if bad:
        click.echo(f"FAILED (tolerance {tol:g}): {', '.join(bad)}", err=True)
        sys.exit(1)
    click.echo(f"all {len(checks)} checks within {tol:g}")


def _parse_classes(text: str, arch) -> list[str]:
    """--classes: comma-separated names of symmetry classes this model admits (or declares inexact, which
    verify_model refuses with the reason)."""
    from glmc.symmetry.random import exact_classes, resolve

    chosen = [c.strip() for c in text.split(",") if c.strip()]
    admitted = list(exact_classes(arch)) + ["rectangular"]
    bad = [c for c in chosen if c not in admitted and resolve(c)[0] not in arch.unsupported
           and ":".join(x for x in resolve(c) if x) not in admitted]
    if not chosen or bad:
        what = f"unknown symmetry class {bad[0]!r} for this {arch.family} model" if bad else "no class given"
        raise click.BadParameter(f"{what}; it admits {', '.join(admitted)}", param_hint="--classes")
    return chosen
