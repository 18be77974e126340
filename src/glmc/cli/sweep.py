"""`glmc sweep`: barriers over a grid of model pairs × alignment methods, one process per cell, resumable, on
this machine, a Ray cluster or Slurm (glmc/experiments/executors.py).

Which pairs (one of):
  MODELS…                     seeds: every pair of N models (or each against the first, --reference)
  --checkpoints RUN_A RUN_B   the same training step of two `glmc train --save-every` runs (RUN/checkpoints/stepN)
  --revisions R1,R2,… ID…     the same revisions of two or more hub models in the local Hugging Face cache
  --at STEP=DIR_A:DIR_B …     the general form: a pair of folders per step (repeat the option)
  --file study.yaml           a sweep file: grid, methods, options and executor (glmc/experiments/study.py)
"""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from glmc.cli.common import parse_methods
from glmc.cli.flags import flag
from glmc.errors import BadOption
from glmc.experiments.executors import EXECUTORS
from glmc.options import BarrierOptions, LearnedOptions, WeightOptions, field_of

# the barrier options this command passes to every cell (a sweep file may set any, glmc/options.py)
PASSED = ("points", "seeds", "steps", "iterations", "data", "split", "batch_size", "max_batches", "max_tokens",
          "device")
EXECUTOR_FLAGS = ("executor", "jobs", "ray_address", "cell_cpus", "cell_gpus", "cell_memory", "slurm_partition",
                  "slurm_time", "slurm_gpus_per_cell", "slurm_max_parallel", "slurm_option", "wait")


@click.command("sweep")
@click.argument("models", nargs=-1)
@click.option("-o", "--out", "out", type=click.Path(file_okay=False),
              help="Sweep directory: cells/, plan.json, sweep.csv/.json/.parquet and plots (an existing one is "
              "resumed).")
@click.option("--file", "study_file", type=click.Path(dir_okay=False),
              help="A sweep file (YAML) describing the whole study; flags given here override its options and "
              "executor.")
@click.option("--status", "status_of", type=click.Path(file_okay=False),
              help="Show each cell of the sweep in this folder as done, running, pending, submitted (a Slurm job "
              "of unknown state), failed or missing, and stop.")
@click.option("--align", "methods", default="none,weight", show_default=True,
              help="Comma-separated alignment methods, each a column of the grid.")
@click.option("--reference", is_flag=True, help="Seeds: each model against the first, not every pair.")
@click.option("--checkpoints", nargs=2, type=click.Path(exists=True, file_okay=False),
              help="Two runs of `glmc train --save-every`: one pair per step both kept.")
@click.option("--revisions", default=None, help="Comma-separated revisions (step0,step1000,…) of the hub ids "
              "given as MODELS, resolved in the local Hugging Face cache (never downloaded): every pair at each.")
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
@click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True,
              help="Where cells run: local processes, a Ray cluster, Slurm through submitit, or submitit's "
              "LocalExecutor (the Slurm path on this machine).")
@click.option("--jobs", default=1, show_default=True, type=click.IntRange(min=1),
              help="local: cells at once, each in its own process with cores / jobs torch threads.")
@click.option("--ray-address", default=None, help="ray: a running cluster ('auto', or HOST:PORT); default: start "
              "a local one bound to the loopback address.")
@click.option("--cell-cpus", default=None, type=click.IntRange(min=1),
              help="ray / slurm: CPU cores per cell (also its torch threads) [1].")
@click.option("--cell-gpus", default=None, type=click.FloatRange(min=0), help="ray: GPUs per cell (fractions "
              "share one) [0].")
@click.option("--cell-memory", default=None, type=click.FloatRange(min=0, min_open=True),
              help="ray / slurm: memory per cell in GB [no reservation].")
@click.option("--slurm-partition", default=None, help="slurm: the partition.")
@click.option("--slurm-time", default=60, show_default=True, type=click.IntRange(min=1),
              help="slurm: time limit per cell, minutes.")
@click.option("--slurm-gpus-per-cell", default=None, type=click.IntRange(min=0), help="slurm: GPUs per cell.")
@click.option("--slurm-max-parallel", default=64, show_default=True, type=click.IntRange(min=1),
              help="slurm: array tasks running at once.")
@click.option("--slurm-option", multiple=True, help="slurm: KEY=VALUE, an extra sbatch option (repeatable), e.g. "
              "account=lab or qos=high.")
@click.option("--wait/--no-wait", default=None, help="slurm: wait for the jobs [return after submission].")
@click.pass_context
def command(ctx, models, out, study_file, status_of, methods, reference, checkpoints, revisions, at, wait, **kw):
    """Run `glmc barrier` for every pair × method of a grid, each cell in its own process (its own peak memory;
    a crash loses that cell only), and gather one tidy table with its plots. A finished cell is never
    recomputed, whichever executor finished it: rerun the same command after an interruption to resume, or,
    after a Slurm submission, to collect the table and resubmit failed or missing cells."""
    from glmc.experiments.study import Study, load_study, run_study

    if status_of:
        return _status(Path(status_of))
    given = {k for k in kw if ctx.get_parameter_source(k) == ParameterSource.COMMANDLINE}
    if study_file:
        grid = [n for n, v in (("MODELS", models), ("--checkpoints", checkpoints), ("--revisions", revisions),
                               ("--at", at), ("--reference", reference)) if v]
        if grid or ctx.get_parameter_source("methods") == ParameterSource.COMMANDLINE:
            raise click.UsageError(f"--file gives the grid and methods; drop {(grid or ['--align'])[0]}")
        study = load_study(study_file)
        study.options.update({k: _value(k, kw[k]) for k in PASSED if k in given})
    else:
        _check_grid_flags(models, checkpoints, revisions, at)
        study = Study(models=list(models), reference=reference, checkpoints=checkpoints,
                      revisions=[r.strip() for r in revisions.split(",") if r.strip()] if revisions is not None
                      else None, at=dict(_parse_at(a) for a in at) or None,
                      methods=parse_methods(methods, "--align"),
                      options={k: _value(k, kw[k]) for k in PASSED if k in given})
    if out:
        study.out = Path(out)
    _executor_flags(study, kw, given, wait, bool(study_file))
    result = run_study(study, progress=True, log=click.echo)
    if result.failed and all(s in ("done", "failed") for s in result.states.values()):
        raise click.ClickException(f"{result.failed} cell(s) failed (see {result.out / 'cells'}/*.error and *.log); "
                                   "rerun the same command to retry them")


def _value(name, value):
    return [int(s) for s in str(value).split(",") if s.strip()] if name == "seeds" else value


def _check_grid_flags(models, checkpoints, revisions, at) -> None:
    given = [bool(checkpoints), revisions is not None, bool(at)]
    if sum(given) > 1:
        raise click.UsageError("give one of --checkpoints, --revisions and --at")
    if (checkpoints or at) and models:
        raise click.UsageError(f"{'--checkpoints' if checkpoints else '--at'} gives the pairs itself; drop the "
                               "MODELS arguments")
    if not (checkpoints or at) and len(models) < 2:
        raise click.UsageError("give at least two models (or --checkpoints, --revisions, --at or --file)")
    if revisions is None and not (checkpoints or at):
        missing = [m for m in models if not Path(m).is_dir()]
        if missing:
            raise click.BadParameter(f"{missing[0]} is not a directory", param_hint="MODELS")


def _executor_flags(study, kw, given, wait, from_file: bool) -> None:
    """The executor flags on the study: every one without a file, those typed on the command line with one."""
    from dataclasses import replace

    def chosen(name):
        return name in given or not from_file

    if chosen("executor"):
        study.executor = kw["executor"]
    if chosen("jobs"):
        study.jobs = kw["jobs"]
    if kw["ray_address"] is not None:
        study.ray_address = kw["ray_address"]
    res = {k: kw[f"cell_{k if k != 'memory_gb' else 'memory'}"] for k in ("cpus", "gpus", "memory_gb")}
    study.resources = replace(study.resources, **{k: v for k, v in res.items() if v is not None})
    extra = dict(_parse_option(o) for o in kw["slurm_option"])
    slurm = {"partition": kw["slurm_partition"], "gpus_per_cell": kw["slurm_gpus_per_cell"]}
    slurm = {k: v for k, v in slurm.items() if v is not None}
    for name in ("time", "max_parallel"):
        if chosen(f"slurm_{name}"):
            slurm[name] = kw[f"slurm_{name}"]
    study.slurm = replace(study.slurm, **slurm, options={**study.slurm.options, **extra})
    if wait is not None:
        study.wait = wait


def _parse_option(text: str):
    key, eq, value = text.partition("=")
    if not (eq and key.strip()):
        raise click.BadParameter(f"{text!r} is not KEY=VALUE", param_hint="--slurm-option")
    return key.strip().replace("-", "_"), value.strip()


def _parse_at(text: str):
    step, eq, pair = text.partition("=")
    a, colon, b = pair.partition(":")
    if not (eq and colon and step and a and b):
        raise click.BadParameter(f"{text!r} is not STEP=DIR_A:DIR_B", param_hint="--at")
    for d in (a, b):
        if not Path(d).is_dir():
            raise click.BadParameter(f"{d} is not a directory", param_hint="--at")
    return step, (a, b)


def _status(out: Path) -> None:
    from glmc.experiments.study import status
    from glmc.experiments.sweep import STATES

    try:
        kind, cells, states = status(out)
    except BadOption as e:
        raise click.ClickException(str(e)) from None
    counts = {s: list(states.values()).count(s) for s in STATES}
    click.echo(f"{out}: {len(cells)} cells ({kind}): " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    wide = max(len(c.pair) for c in cells) + 2
    for c in cells:
        error = ""
        if states[c.name] == "failed":
            lines = (out / "cells" / f"{c.name}.error").read_text().strip().splitlines()
            error = f"  {lines[-1]}" if lines else ""
        click.echo(f"  {c.pair:<{wide}}{c.step:>10}  {c.method:<16}{states[c.name]}{error}")
