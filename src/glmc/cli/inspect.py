"""`glmc inspect A [B …]`: what each checkpoint is, which symmetry groups apply, and whether they can be aligned."""

import json

import click

from glmc.cli.common import MODEL, resolve_models, revision_option

# exit status when the report says the models cannot be aligned: scripts can tell it from success (0) and from an
# error (1: a checkpoint that cannot be read; 2: a usage error)
CANNOT_ALIGN = 3


@click.command("inspect")
@click.argument("models", nargs=-1, required=True, type=MODEL)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (schema glmc.inspect/1).")
@revision_option
def command(models, as_json, revision):
    """Report, per model, its family, class, sizes, parameter count, stored dtype, weight files, tokenizer
    fingerprint and every symmetry group glmc uses for it (kind, size) with those it refuses and why; for two or
    more models, whether they can be aligned and, if not, the first reason (the check align, barrier and merge run
    before any work). Reads the checkpoints only. Exits with status 3 when the models cannot be aligned."""
    from glmc.api import inspect

    report = inspect(*resolve_models(models, revision))
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        _print(report, len(models))
    if report.get("compatible") is False:
        raise SystemExit(CANNOT_ALIGN)


def _print(report: dict, n_models: int) -> None:
    for m in report["models"]:
        click.echo(_model_line(m))
        rows = []
        for role, g in m["groups"].items():
            params = ", ".join(f"{k} {v}" for k, v in (g.get("params") or {}).items())
            kind = g["kind"] + (f" ({params})" if params else "")
            copies = f" × {g['batch']} copies" if g.get("batch") else ""
            layers = " per layer" if g.get("per_layer") else ""
            extra = f" (also {', '.join(g['extensions'])})" if g.get("extensions") else ""
            rows.append((role, kind, f"size {g['size']}{copies}{layers}{extra}"))
        rows += [(role, "refused", why) for role, why in m["refused"].items()]
        w_role, w_kind = (max(len(r[i]) for r in rows) + 2 for i in (0, 1)) if rows else (0, 0)
        for role, kind, what in rows:
            click.echo(f"  {role:<{w_role}}{kind:<{w_kind}}{what}")
    if "compatible" in report:
        if report["compatible"]:
            click.echo(f"can be aligned: the {n_models} models share family, depth, fixed sizes and tokenizer")
        else:
            click.echo(f"cannot be aligned ({report['reason']}): {report['message']}")


def _model_line(m: dict) -> str:
    s = m["sizes"]
    fixed = ", ".join(f"{k} {'×'.join(map(str, v))}" for k, v in s.items()
                      if k not in ("layers", "d_model", "heads", "d_head", "mlp", "activation", "norm"))
    w = m["weights"] or {}
    files = f"{w.get('format')}, {w.get('files')} file{'s' if w.get('files') != 1 else ''}" + (
        ", sharded" if w.get("sharded") else "")
    tok = f"tokenizer {m['tokenizer']['sha256']}" if m["tokenizer"] else "no tokenizer"
    layers = f"{s['layers']} layer{'s' if s['layers'] != 1 else ''}"
    return (f"{m['path']}: {m['family']} ({m['class']}, {m['task']}), {layers}, d_model {s['d_model']}, "
            f"{s['heads']} heads × {s['d_head']}, MLP {s['mlp']} ({s['activation']}); {fixed}; "
            f"{m['parameters']:,} parameters, {m['dtype']} ({files}); {tok}")
