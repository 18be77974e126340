"""`glmc report RESULTS… -o report.html`: one self-contained HTML page of barrier, decomposition and sweep results."""

from pathlib import Path

import click

from glmc.cli.common import check_out_path


@click.command("report")
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("-o", "--out", "out", required=True, type=click.Path(dir_okay=False),
              help="The HTML file to write (figures embedded: it opens offline, alone).")
@click.option("--title", default="glmc report", show_default=True)
def command(results, out, title):
    """Gather `glmc barrier --json` files (curves with standard errors, decompositions) and `glmc sweep`
    directories (or their sweep.json) into one HTML page: every figure drawn and embedded, every table."""
    from glmc.experiments.report import build_report
    from glmc.io import atomic_path

    check_out_path(out, "--out")
    text = build_report(results, title)
    with atomic_path(out) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")
    click.echo(f"wrote {out} ({len(text) / 1024:.0f} KiB, {text.count('<img ')} figures)")
