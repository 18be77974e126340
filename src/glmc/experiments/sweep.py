"""Sweeps: a grid of model pairs × alignment methods, one `glmc barrier` per cell, gathered into one tidy table.

Layout of a sweep directory OUT:
  OUT/cells/<cell>.json     one finished cell: the glmc.barrier JSON of one pair and one method, plus "cell"
                            (pair, step, method, model paths) and "resources" (wall_seconds, peak_rss_mb,
                            peak_cuda_mb, threads). Written atomically when the cell ends, so a file that exists is a
                            finished cell: a resumed sweep skips it.
  OUT/cells/<cell>.log      the cell process's stdout and stderr
  OUT/cells/<cell>.error    the last lines of a failed cell's output (the cell is retried on the next run)
  OUT/plan.json             the grid (every cell's name, pair, step, method and command line) and how it runs,
                            written before any cell: `glmc sweep --status OUT` reads it
  OUT/slurm/, OUT/submitit/ submitit's job folders and jobs.json (cell -> job id) for those executors
  OUT/sweep.json            {"schema": "glmc.sweep/1", "kind": "seeds" | "checkpoints", "rows": [...]}
  OUT/sweep.csv, OUT/sweep.parquet (with pyarrow)   the same rows, one per cell (COLUMNS)
  OUT/sweep-steps.png       checkpoints: barrier against training step, one line per method (± one s.e.)
  OUT/sweep-matrix.png      seeds: the barrier of every pair as a matrix, one panel per method
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from glmc.adapters import adapter_for_dir
from glmc.data import parse_spec
from glmc.errors import BadOption, IncompatibleModels
from glmc.experiments.executors import ACTIVE, CellTask, job_states
from glmc.experiments.plots import _save
from glmc.io import atomic_path
from glmc.models.checkpoint import check_data_task, check_files, load_checked
from glmc.models.hub import looks_like_hub_id
from glmc.models.inspect import incompatibility, tokenizer_fingerprint
from glmc.options import ActivationOptions, BarrierOptions, LearnedOptions, WeightOptions
from glmc.provenance import provenance

COLUMNS = ["pair", "model_a", "model_b", "step", "method", "status", "loss_barrier", "loss_barrier_se",
           "loss_barrier_mean", "loss_barrier_mean_se", "acc_drop", "acc_drop_se", "loss_a", "loss_b",
           "seeds", "loss_barrier_seed_sd", "n_batches", "n_predictions", "unit", "align_seconds", "curve_seconds",
           "wall_seconds", "peak_rss_mb", "peak_cuda_mb", "error"]


@dataclass(frozen=True)
class Cell:
    """One pair of models and one method; `step` is the training step or revision ("" for a seeds sweep)."""
    pair: str
    model_a: str
    model_b: str
    method: str
    step: str = ""
    a_index: int = 0  # positions in a seeds sweep's model list (for the matrix)
    b_index: int = 1

    @property
    def name(self) -> str:
        raw = "__".join(x for x in (self.pair, self.step, self.method) if x)
        return re.sub(r"[^A-Za-z0-9._~-]+", "_", raw)


def pairs_of(n: int, reference: bool = False) -> list[tuple[int, int]]:
    """Index pairs of n models: every i < j, or each against the first (`reference`)."""
    return [(0, j) for j in range(1, n)] if reference else [(i, j) for i in range(n) for j in range(i + 1, n)]


def seed_cells(models: list, methods: list, reference: bool = False) -> list[Cell]:
    """Every pair of the models (i < j), or each model against the first (`reference`), × methods."""
    names = _names(models)
    pairs = pairs_of(len(models), reference)
    return [Cell(f"{names[i]}~{names[j]}", str(models[i]), str(models[j]), m, "", i, j) for i, j in pairs
            for m in methods]


def step_cells(steps: dict, methods: list, pair: str = "") -> list[Cell]:
    """steps: step label -> (folder A, folder B): the same step of two runs, × methods."""
    cells = []
    for step, (a, b) in steps.items():
        label = pair or f"{_names([a, b])[0]}~{_names([a, b])[1]}"
        cells += [Cell(label, str(a), str(b), m, str(step)) for m in methods]
    return cells


def runs_cells(runs: list, methods: list, reference: bool = False) -> list[Cell]:
    """Every pair of `glmc train --save-every` runs (or each against the first) at every step all of them kept,
    × methods: seeds × checkpoints."""
    found = [_steps(r) for r in runs]
    common = sorted(set.intersection(*(set(f) for f in found)))
    names = _names(runs)
    pairs = pairs_of(len(runs), reference)
    return [Cell(f"{names[i]}~{names[j]}", str(found[i][s]), str(found[j][s]), m, f"step{s}", i, j)
            for s in common for i, j in pairs for m in methods]


def _steps(run) -> dict:
    return {int(p.name[4:]): p for p in (Path(run) / "checkpoints").glob("step*") if p.name[4:].isdigit()}


def _names(models) -> list[str]:
    """Short labels: the last path component that tells the folders apart (runs/s0/checkpoints/step3 and
    runs/s1/checkpoints/step3 give s0 and s1), else m0, m1, …"""
    parts = [Path(m).resolve().parts[::-1] for m in models]
    for k in range(min(len(p) for p in parts)):
        names = [p[k] for p in parts]
        if len(set(names)) == len(names):
            return names
    return [f"m{i}" for i in range(len(models))]


def row_of(cell: Cell, result: dict | None, error: str = "") -> dict:
    """The tidy row of one cell (its glmc.barrier JSON, or None when it failed)."""
    row = {c: None for c in COLUMNS}
    row.update({"pair": cell.pair, "model_a": cell.model_a, "model_b": cell.model_b, "step": cell.step,
                "method": cell.method, "status": "ok" if result else "failed", "error": error or None})
    if not result:
        return row
    r = result["results"][cell.method]
    row.update({k: r.get(k) for k in ("loss_barrier", "loss_barrier_se", "loss_barrier_mean", "loss_barrier_mean_se",
                                      "acc_drop", "acc_drop_se", "n_batches", "n_predictions", "unit",
                                      "align_seconds", "curve_seconds")})
    row["loss_a"], row["loss_b"] = r["loss_endpoints"]
    over = r.get("over_seeds")
    if isinstance(over, dict):
        row["seeds"] = over["loss_barrier"]["n"]
        row["loss_barrier_seed_sd"] = over["loss_barrier"]["sd"]
    row.update({k: result.get("resources", {}).get(k) for k in ("wall_seconds", "peak_rss_mb", "peak_cuda_mb")})
    return row


def write_table(rows: list[dict], out: Path, kind: str, meta: dict) -> list[Path]:
    """sweep.json, sweep.csv and (when pyarrow imports) sweep.parquet in `out`; returns the paths written."""
    written = [out / "sweep.json", out / "sweep.csv"]
    with atomic_path(written[0]) as tmp:
        tmp.write_text(json.dumps({"schema": "glmc.sweep/1", "kind": kind, "columns": COLUMNS, **meta,
                                   "rows": rows}, indent=2, default=str) + "\n")
    with atomic_path(written[1]) as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        w.writerows(rows)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return written
    table = pa.Table.from_pylist([{c: r[c] for c in COLUMNS} for r in rows], schema=_arrow_schema(pa))
    with atomic_path(out / "sweep.parquet") as tmp:
        pq.write_table(table, tmp)
    return written + [out / "sweep.parquet"]


def _arrow_schema(pa):
    text = {"pair", "model_a", "model_b", "step", "method", "status", "unit", "error"}
    ints = {"seeds", "n_batches", "n_predictions"}
    return pa.schema([(c, pa.string() if c in text else pa.int64() if c in ints else pa.float64()) for c in COLUMNS])


def step_number(step: str) -> float:
    """The number in a step label ("step1000" -> 1000; "final" and others -> NaN)."""
    m = re.search(r"(\d+)$", str(step))
    return float(m.group(1)) if m else float("nan")


def plot_steps(rows: list[dict], path, title: str = "") -> Path:
    """Barrier (the paper's, ± one standard error over batches) against training step, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    fig, axes = plt.subplots(1, 2, figsize=(10.4, 3.8))
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = sorted((r for r in rows if r["method"] == method and r["status"] == "ok"),
                      key=lambda r: step_number(r["step"]))
        x = [step_number(r["step"]) for r in mine]
        axes[0].errorbar(x, [r["loss_barrier"] for r in mine], yerr=[r["loss_barrier_se"] or 0 for r in mine],
                         marker="o", ms=3, capsize=2, label=method)
        axes[1].errorbar(x, [100 * r["acc_drop"] for r in mine], yerr=[100 * (r["acc_drop_se"] or 0) for r in mine],
                         marker="o", ms=3, capsize=2, label=method)
    axes[0].set(xlabel="training step", ylabel="loss barrier", title="loss barrier along training")
    axes[1].set(xlabel="training step", ylabel="accuracy drop (%)", title="accuracy drop along training")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path, title)


def plot_matrix(rows: list[dict], cells: list[Cell], path, title: str = "") -> Path:
    """The barrier of every pair as a symmetric matrix over the models, one panel per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    by_name = {(c.pair, c.method): c for c in cells}
    names = {}
    for c in cells:
        a, b = c.pair.split("~", 1)
        names[c.a_index], names[c.b_index] = a, b
    n = max(names) + 1
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, axes = plt.subplots(1, len(methods), figsize=(3.6 * len(methods) + 1, 3.4), squeeze=False)
    vmax = max([r["loss_barrier"] for r in rows if r["status"] == "ok"] + [1e-6])
    for ax, method in zip(axes[0], methods):
        m = np.full((n, n), np.nan)
        for r in rows:
            c = by_name.get((r["pair"], r["method"]))
            if c is not None and r["method"] == method and r["status"] == "ok":
                m[c.a_index, c.b_index] = m[c.b_index, c.a_index] = r["loss_barrier"]
        np.fill_diagonal(m, 0.0)
        im = ax.imshow(m, cmap="magma_r", vmin=0, vmax=vmax)
        labels = [names[i] for i in range(n)]
        ax.set_xticks(range(n), labels, rotation=45, ha="right", fontsize=7)
        ax.set_yticks(range(n), labels, fontsize=7)
        for (i, j), v in np.ndenumerate(m):
            if not np.isnan(v) and i != j:
                ax.text(j, i, f"{v:.3f}", ha="center", va="center", fontsize=7, color="tab:blue")
        ax.set_title(method, fontsize=9)
    fig.colorbar(im, ax=axes[0][-1], shrink=0.8, label="loss barrier")
    return _save(fig, path, title)


def cell_record(cell: Cell) -> dict:
    return asdict(cell)


# ----------------------------------------------------------------------------------------------- grids

def revision_cells(models: list, labels: list, revisions: list, methods: list, reference: bool = False,
                   resolve=None) -> list[Cell]:
    """Every pair of hub `models` (or each against the first) at every revision × methods: a PolyPythias-shaped
    grid of seeds × checkpoints. `resolve(model, revision)` gives the cached folder."""
    pairs = pairs_of(len(models), reference)
    return [Cell(f"{labels[i]}~{labels[j]}", str(resolve(models[i], r)), str(resolve(models[j], r)), m, str(r), i, j)
            for r in revisions for i, j in pairs for m in methods]


def model_labels(models) -> list[str]:
    """Labels of the models as given: hub ids by their name (ORG/NAME -> NAME), folders by `_names`."""
    if all(not Path(m).is_dir() and looks_like_hub_id(str(m)) for m in models):
        names = [str(m).split("@")[0].split("/")[-1] for m in models]
        if len(set(names)) == len(names):
            return names
    return _names(models)


def check_grid(cells: list[Cell], data=None) -> None:
    """The checks of `glmc inspect`, before any cell runs: every model directory is readable (headers only), and
    every pair can be aligned (family, task, sizes, groups, tokenizer), else IncompatibleModels / BadCheckpoint
    naming the model. Models are loaded once per distinct config and tokenizer, so a suite of seeds and revisions
    of one shape loads one model."""
    paths = list(dict.fromkeys(p for c in cells for p in (c.model_a, c.model_b)))
    keys, loaded = {}, {}
    for path in paths:
        check_files(path)
        config = Path(path) / adapter_for_dir(path).checkpoint.config_file
        key = (hashlib.sha256(config.read_bytes()).hexdigest(), json.dumps(tokenizer_fingerprint(path)))
        keys[path] = key
        if key not in loaded:
            loaded[key] = (load_checked(path)[0], path)
    for a, b in dict.fromkeys((keys[c.model_a], keys[c.model_b]) for c in cells):
        if a == b:
            continue
        (ma, pa), (mb, pb) = loaded[a], loaded[b]
        found = incompatibility([ma, mb], [pa, pb])
        if found is not None:

            shown = [c for c in cells if (keys[c.model_a], keys[c.model_b]) == (a, b)][0]
            raise IncompatibleModels(f"pair {shown.pair} ({shown.model_a} and {shown.model_b}) cannot be aligned: "
                                     f"{found[1]}")
    if data is not None:

        try:
            task = parse_spec(data)["task"]
        except ValueError as e:

            raise BadOption(str(e)) from None
        for model, path in loaded.values():
            check_data_task(task, data, model, path)


# ------------------------------------------------------------------------------------- barrier options

def option_names() -> dict[str, str]:
    """option name -> the options class holding it, for every option a sweep passes to its cells' `glmc barrier`
    (glmc/options.py), plus the data options."""
    out = {n: "data" for n in ("data", "tokenizer", "max_tokens", "device")}
    for cls in (BarrierOptions, WeightOptions, ActivationOptions, LearnedOptions):
        for n in cls.names():
            if n not in ("mode", "progress", "batches", "eval_dtype") or cls is BarrierOptions:
                out.setdefault(n, cls.__name__)
    out.pop("progress")  # cells never draw progress bars
    return out


def barrier_args(options: dict) -> list[str]:
    """`glmc barrier` flags for `options` (name -> value): --name value, --name/--no-name for booleans, lists
    comma-joined. An unknown name is refused in one line naming it."""
    known = option_names()
    args = []
    for name, value in options.items():
        if name not in known:
            raise BadOption(f"unknown option {name!r} for the sweep's barriers; known: {', '.join(sorted(known))}")
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else f"--no-{flag[2:]}")
        elif isinstance(value, (list, tuple)):
            args += [flag, ",".join(str(v) for v in value)]
        else:
            args += [flag, str(value)]
    return args


# -------------------------------------------------------------------------------------------- running

PLAN = "plan.json"


def tasks_for(cells: list[Cell], out: Path, args: list[str], threads: int):
    return [CellTask(c.name, str(out / "cells"), ("barrier", c.model_a, c.model_b, "--align", c.method, *args,
                                                   "--no-progress"), threads) for c in cells]


def write_plan(out: Path, kind: str, cells: list[Cell], args: list[str], executor: dict) -> None:
    plan = {"schema": "glmc.sweep-plan/1", "kind": kind, "cells": [cell_record(c) | {"name": c.name} for c in cells],
            "barrier_args": args, "executor": executor, "provenance": provenance(options={"barrier_args": args})}
    with atomic_path(out / PLAN) as tmp:
        tmp.write_text(json.dumps(plan, indent=1, default=str) + "\n")


STATES = ("done", "running", "pending", "submitted", "failed", "missing")
ACTIVE_STATES = ("running", "pending", "submitted")


def cell_states(out: Path, cells: list[Cell]) -> dict:
    """cell name -> a STATES entry: "done"; a Slurm job "running" or "pending" (sacct's word), or "submitted"
    when sacct cannot say (the job may still run); "failed"; "missing" (never run, or its job ended without a
    result)."""
    jobs = job_states(out)
    states = {}
    for c in cells:
        target = out / "cells" / f"{c.name}.json"
        if target.is_file():
            states[c.name] = "done"
        elif jobs.get(c.name) in ACTIVE and not _job_finished(out, c.name):
            states[c.name] = {"RUNNING": "running", "PENDING": "pending"}.get(jobs[c.name], "submitted")
        elif target.with_suffix(".error").is_file():
            states[c.name] = "failed"
        else:
            states[c.name] = "missing"
    return states


def _job_finished(out: Path, name: str) -> bool:
    """A submitted cell whose job left its result (submitit's *_result.pkl): finished, whatever sacct says."""
    record = out / "slurm" / "jobs.json"
    job = json.loads(record.read_text()).get(name) if record.is_file() else None
    return bool(job) and any((out / "slurm").glob(f"{job}/*_result.pkl"))


def read_plan(out: Path) -> tuple[str, list[Cell]]:
    f = Path(out) / PLAN
    if not f.is_file():
        raise BadOption(f"{out} holds no sweep ({PLAN} missing): give the -o folder of a `glmc sweep` run")
    plan = json.loads(f.read_text())
    fields = set(Cell.__dataclass_fields__)
    return plan["kind"], [Cell(**{k: v for k, v in c.items() if k in fields}) for c in plan["cells"]]


def rows_for(out: Path, cells: list[Cell]) -> list[dict]:
    rows = []
    for cell in cells:
        target = out / "cells" / f"{cell.name}.json"
        if target.is_file():
            rows.append(row_of(cell, json.loads(target.read_text())))
            continue
        error = target.with_suffix(".error")
        msg = error.read_text().strip().splitlines()[-1] if error.is_file() and error.read_text().strip() else \
            "not run"
        rows.append(row_of(cell, None, msg))
    return rows


def summary(rows: list[dict]) -> str:
    """The printed table: whole pair labels (the column is as wide as the longest), one line per cell."""
    wide = max([len("pair")] + [len(r["pair"]) for r in rows]) + 2
    step = max([len("step")] + [len(str(r["step"])) for r in rows]) + 2
    meth = max([len("method")] + [len(r["method"]) for r in rows]) + 2
    lines = [f"{'pair':<{wide}}{'step':>{step}}{'method':>{meth}}{'barrier':>10}{'± se':>9}{'acc drop':>10}"
             f"{'s':>8}{'MB':>8}"]
    for r in rows:
        head = f"{r['pair']:<{wide}}{r['step']:>{step}}{r['method']:>{meth}}"
        if r["status"] != "ok":
            lines.append(f"{head}   {r['status']}: {r['error']}")
            continue
        se = "n/a" if r["loss_barrier_se"] is None else f"{r['loss_barrier_se']:.4f}"
        lines.append(f"{head}{r['loss_barrier']:>10.4f}{se:>9}{100 * r['acc_drop']:>9.2f}%{r['wall_seconds']:>8.1f}"
                     f"{r['peak_rss_mb']:>8.0f}")
    return "\n".join(lines)
