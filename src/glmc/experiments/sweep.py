"""Sweeps: a grid of model pairs × alignment methods, one `glmc barrier` per cell, gathered into one tidy table.

Layout of a sweep directory OUT:
  OUT/cells/<cell>.json     one finished cell: the glmc.barrier JSON of one pair and one method, plus "cell"
                            (pair, step, method, model paths) and "resources" (wall_seconds, peak_rss_mb,
                            peak_cuda_mb, threads). Written atomically when the cell ends, so a file that exists is a
                            finished cell: a resumed sweep skips it.
  OUT/cells/<cell>.error    the last lines of a failed cell's output (the cell is retried on the next run)
  OUT/sweep.json            {"schema": "glmc.sweep/1", "kind": "seeds" | "checkpoints", "rows": [...]}
  OUT/sweep.csv, OUT/sweep.parquet (with pyarrow)   the same rows, one per cell (COLUMNS)
  OUT/sweep-steps.png       checkpoints: barrier against training step, one line per method (± one s.e.)
  OUT/sweep-matrix.png      seeds: the barrier of every pair as a matrix, one panel per method
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from glmc.experiments.plots import _save
from glmc.io import atomic_path

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


def seed_cells(models: list, methods: list, reference: bool = False) -> list[Cell]:
    """Every pair of the models (i < j), or each model against the first (`reference`), × methods."""
    names = _names(models)
    pairs = [(0, j) for j in range(1, len(models))] if reference else \
        [(i, j) for i in range(len(models)) for j in range(i + 1, len(models))]
    return [Cell(f"{names[i]}~{names[j]}", str(models[i]), str(models[j]), m, "", i, j) for i, j in pairs
            for m in methods]


def step_cells(steps: dict, methods: list, pair: str = "") -> list[Cell]:
    """steps: step label -> (folder A, folder B): the same step of two runs, × methods."""
    cells = []
    for step, (a, b) in steps.items():
        label = pair or f"{_names([a, b])[0]}~{_names([a, b])[1]}"
        cells += [Cell(label, str(a), str(b), m, str(step)) for m in methods]
    return cells


def run_checkpoints(run_a, run_b) -> dict:
    """step -> (A's, B's) checkpoint folders for every step both runs kept (`glmc train --save-every`), by step."""
    found = [{int(p.name[4:]): p for p in (Path(r) / "checkpoints").glob("step*") if p.name[4:].isdigit()}
             for r in (run_a, run_b)]
    common = sorted(set(found[0]) & set(found[1]))
    return {f"step{s}": (found[0][s], found[1][s]) for s in common}


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
