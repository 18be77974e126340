"""`glmc sweep`: barriers over a grid of model pairs × alignment methods, one process per cell, resumable.

Which pairs (one of):
  MODELS…                     seeds: every pair of N models (or each against the first, --reference)
  --checkpoints RUN_A RUN_B   the same training step of two `glmc train --save-every` runs (RUN/checkpoints/stepN)
  --revisions R1,R2,… ID_A ID_B   the same revisions of two hub models in the local Hugging Face cache
  --at STEP=DIR_A:DIR_B …     the general form: a pair of folders per step (repeat the option)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click

from glmc.cli.common import parse_methods
from glmc.cli.flags import flag
from glmc.errors import BadCheckpoint
from glmc.options import BarrierOptions, LearnedOptions, WeightOptions, field_of


@click.command("sweep")
@click.argument("models", nargs=-1)
@click.option("-o", "--out", "out", required=True, type=click.Path(file_okay=False),
              help="Sweep directory: cells/, sweep.csv/.json/.parquet and plots (an existing one is resumed).")
@click.option("--align", "methods", default="none,weight", show_default=True,
              help="Comma-separated alignment methods, each a column of the grid.")
@click.option("--reference", is_flag=True, help="Seeds: each model against the first, not every pair.")
@click.option("--checkpoints", nargs=2, type=click.Path(exists=True, file_okay=False),
              help="Two runs of `glmc train --save-every`: one pair per step both kept.")
@click.option("--revisions", default=None, help="Comma-separated revisions (step0,step1000,…) of the two hub ids "
              "given as MODELS, resolved in the local Hugging Face cache (never downloaded).")
@click.option("--at", "at", multiple=True, help="STEP=DIR_A:DIR_B, repeatable: a pair of folders per step.")
@flag(BarrierOptions, "points")
@flag(BarrierOptions, "seeds", help="Comma-separated: " + field_of(BarrierOptions, "seeds").metadata["help"])
@flag(LearnedOptions, "steps")
@flag(WeightOptions, "iterations")
@click.option("--data", default=None, help="Data override (default: model A's glmc.json).")
@flag(BarrierOptions, "split")
@flag(BarrierOptions, "batch_size")
@flag(BarrierOptions, "max_batches")
@click.option("--max-tokens", default=None, type=click.IntRange(min=1), help="LMs: at most this many tokens.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:1, … (every cell).")
@click.option("--jobs", default=1, show_default=True, type=click.IntRange(min=1),
              help="Cells run at once, each in its own process with cores / jobs torch threads.")
def command(models, out, methods, reference, checkpoints, revisions, at, points, seeds, steps, iterations, data,
            split, batch_size, max_batches, max_tokens, device, jobs):
    """Run `glmc barrier` for every pair × method of a grid, each cell in its own process (its own peak memory;
    a crash loses that cell only), and gather one tidy table with its plots. A finished cell is never
    recomputed: rerun the same command after an interruption to resume."""
    from glmc.experiments import sweep as sw

    method_list = parse_methods(methods, "--align")
    kind, cells = _grid(models, method_list, reference, checkpoints, revisions, at)
    out = Path(out)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    passthrough = _barrier_args(points, seeds, steps, iterations, data, split, batch_size, max_batches, max_tokens,
                                device)
    threads = max(1, (os.cpu_count() or 1) // jobs)
    done = [c for c in cells if (out / "cells" / f"{c.name}.json").is_file()]
    click.echo(f"{len(cells)} cells ({kind}); {len(done)} already finished (kept); {len(cells) - len(done)} to run, "
               f"{jobs} at a time with {threads} thread(s) each")
    todo = [c for c in cells if c not in done]
    counter = iter(range(1, len(todo) + 1))

    def one(cell):
        ok, msg = _run_cell(cell, out, passthrough, threads)
        click.echo(f"[{next(counter)}/{len(todo)}] {cell.pair} {cell.step} {cell.method}: {msg}")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, todo))
    rows = [_row(sw, c, out) for c in cells]
    meta = {"methods": method_list, "passthrough": passthrough, "cells": len(cells),
            "failed": sum(r["status"] != "ok" for r in rows)}
    for p in sw.write_table(rows, out, kind, meta):
        click.echo(f"wrote {p}")
    ok_rows = [r for r in rows if r["status"] == "ok"]
    if ok_rows and kind == "checkpoints":
        click.echo(f"wrote {sw.plot_steps(ok_rows, out / 'sweep-steps.png', title='barrier along training')}")
    elif ok_rows:
        click.echo(f"wrote {sw.plot_matrix(ok_rows, cells, out / 'sweep-matrix.png', title='barrier between seeds')}")
    click.echo(_summary(rows))
    if meta["failed"]:
        raise click.ClickException(f"{meta['failed']} cell(s) failed (see {out / 'cells'}/*.error); rerun the same "
                                   "command to retry them")


def _grid(models, methods, reference, checkpoints, revisions, at):
    from glmc.experiments import sweep as sw

    given = [bool(checkpoints), revisions is not None, bool(at)]
    if sum(given) > 1:
        raise click.UsageError("give one of --checkpoints, --revisions and --at")
    if checkpoints:
        if models:
            raise click.UsageError("--checkpoints takes the two runs itself; drop the MODELS arguments")
        steps = sw.run_checkpoints(*checkpoints)
        if not steps:
            raise BadCheckpoint(f"{checkpoints[0]} and {checkpoints[1]} share no checkpoints/stepN folder; train "
                                "both with `glmc train … --save-every K`")
        return "checkpoints", sw.step_cells(steps, methods)
    if revisions is not None:
        if len(models) != 2:
            raise click.UsageError("--revisions needs two hub ids as MODELS")
        revs = [r.strip() for r in revisions.split(",") if r.strip()]
        steps = {r: (resolve_revision(models[0], r), resolve_revision(models[1], r)) for r in revs}
        return "checkpoints", sw.step_cells(steps, methods, pair=f"{models[0]}~{models[1]}")
    if at:
        if models:
            raise click.UsageError("--at gives the pairs itself; drop the MODELS arguments")
        return "checkpoints", sw.step_cells(dict(_parse_at(a) for a in at), methods)
    if len(models) < 2:
        raise click.UsageError("give at least two models (or --checkpoints, --revisions or --at)")
    missing = [m for m in models if not Path(m).is_dir()]
    if missing:
        raise click.BadParameter(f"{missing[0]} is not a directory", param_hint="MODELS")
    return "seeds", sw.seed_cells(list(models), methods, reference)


def _parse_at(text: str):
    step, eq, pair = text.partition("=")
    a, colon, b = pair.partition(":")
    if not (eq and colon and step and a and b):
        raise click.BadParameter(f"{text!r} is not STEP=DIR_A:DIR_B", param_hint="--at")
    for d in (a, b):
        if not Path(d).is_dir():
            raise click.BadParameter(f"{d} is not a directory", param_hint="--at")
    return step, (a, b)


def resolve_revision(repo_id: str, revision: str) -> Path:
    """The folder of `revision` of hub model `repo_id` in the local Hugging Face cache (nothing is downloaded;
    glmc/models/hub.py: a missing revision is one line naming the download command)."""
    from glmc.models.hub import snapshot

    return snapshot(repo_id, revision)


def _barrier_args(points, seeds, steps, iterations, data, split, batch_size, max_batches, max_tokens, device):
    args = ["--points", points, "--iterations", iterations, "--split", split, "--batch-size", batch_size,
            "--device", device, "--no-progress"]
    for opt, value in (("--seeds", seeds), ("--steps", steps), ("--data", data), ("--max-batches", max_batches),
                       ("--max-tokens", max_tokens)):
        if value is not None:
            args += [opt, value]
    return [str(a) for a in args]


def _run_cell(cell, out: Path, passthrough: list, threads: int):
    """Run one cell in its own process; (ok, a one-line report)."""
    target = out / "cells" / f"{cell.name}.json"
    error = target.with_suffix(".error")
    cmd = [sys.executable, "-m", "glmc.cli.sweep_cell", str(target), "barrier", cell.model_a, cell.model_b,
           "--align", cell.method, *passthrough]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "GLMC_THREADS": str(threads)}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0 or not target.is_file():
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        error.write_text(f"$ {' '.join(cmd)}\n{tail}\n")
        last = tail.splitlines()[-1] if tail else f"exit code {proc.returncode}"
        return False, f"FAILED ({last})"
    error.unlink(missing_ok=True)
    import json

    r = json.loads(target.read_text())
    m = r["results"][cell.method]
    se = m.get("loss_barrier_se")
    return True, (f"barrier {m['loss_barrier']:.4f}" + (f" ± {se:.4f}" if se is not None else "") +
                  f" ({time.perf_counter() - t0:.1f} s, peak {r['resources']['peak_rss_mb']:.0f} MB)")


def _row(sw, cell, out: Path) -> dict:
    import json

    target = out / "cells" / f"{cell.name}.json"
    if target.is_file():
        return sw.row_of(cell, json.loads(target.read_text()))
    error = target.with_suffix(".error")
    msg = error.read_text().strip().splitlines()[-1] if error.is_file() else "not run"
    return sw.row_of(cell, None, msg)


def _summary(rows) -> str:
    lines = [f"{'pair':<28}{'step':>10}{'method':>10}{'barrier':>10}{'± se':>9}{'acc drop':>10}{'s':>8}{'MB':>8}"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"{r['pair'][:27]:<28}{r['step']:>10}{r['method']:>10}   failed: {r['error']}")
            continue
        se = "n/a" if r["loss_barrier_se"] is None else f"{r['loss_barrier_se']:.4f}"
        lines.append(f"{r['pair'][:27]:<28}{r['step']:>10}{r['method']:>10}{r['loss_barrier']:>10.4f}{se:>9}"
                     f"{100 * r['acc_drop']:>9.2f}%{r['wall_seconds']:>8.1f}{r['peak_rss_mb']:>8.0f}")
    return "\n".join(lines)

