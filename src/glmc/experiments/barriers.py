"""Barrier experiments: align with each method, evaluate the path on shared batches, tabulate.

Result schema ("glmc.barrier/1"), as written by `glmc barrier --json`:
  models: [path A, path B]; data: data spec; split; batch_size; n_batches; task; points
  results: {method: {lambdas: [..], loss: [..], acc: [..],               # per-λ curve (λ=0 is A, λ=1 is B′)
                     loss_barrier, loss_barrier_lambda, loss_barrier_mean,
                     acc_drop, acc_drop_lambda, acc_drop_mean, loss_endpoints, acc_endpoints, loss_midpoint,
                     align_seconds, curve_seconds, alignment: {method report},
                     # added compatibly (absent in older files):
                     loss_se, acc_se: [..] (per λ), loss_barrier_se, loss_barrier_mean_se, acc_drop_se, acc_drop_mean_se
                     (standard errors over evaluation batches, glmc/paths/barrier.py), n_batches, n_predictions,
                     unit ("tokens" | "images"), per_batch: {n: [..], loss_sum: [[..] per λ], correct: [[..]]},
                     repeats: "deterministic" | [{seed, loss_barrier, …}], over_seeds: {metric: {mean, sd, se, n}}
                     (--seeds), decomposition: {…} (--decompose; glmc/api/decomposition.py)}}
"""

from __future__ import annotations

import csv

from glmc.api import barrier
from glmc.api.decomposition import format_decomposition
from glmc.io import atomic_path
from glmc.matching import method_options
from glmc.options import BarrierOptions


def run_barriers(model_a, model_b, ds, batches, methods, points=BarrierOptions.points, progress=True,
                 align_options=None, mode: str = "native", dtype=None, seeds=None, decompose: int | None = None,
                 decompose_by=("roles", "layers", "cells")) -> dict:
    """Each method's `glmc.barrier` curve on the same batches; mode "circuit": align as usual, then interpolate
    the paper's circuit form (glmc/view/circuit.py). `seeds`: repeats of stochastic methods; `decompose`: also
    decompose each path on a grid of this many points (glmc/paths/decompose.py)."""
    results = {}
    for method in methods:
        options = method_options(method, {"progress": progress, **(align_options or {})})
        options.pop("progress", None)
        curve = barrier(model_a, model_b, ds, points, align=method, batches=batches, mode=mode, progress=progress,
                        eval_dtype=dtype, seeds=seeds, **options)
        if decompose:
            curve.decompose(batches=batches, points=decompose, by=decompose_by, progress=progress)
        results[method] = curve.to_dict()
    return {"task": ds.task, "points": points, "mode": mode, "results": results}


def format_table(result: dict) -> str:
    w = max([14] + [len(m) + 2 for m in result["results"]])
    rows = [f"{'method':<{w}}{'loss A':>9}{'loss B':>9}{'L(0.5)':>9}{'barrier':>10}{'± se':>8}{'(mean)':>9}"
            f"{'acc drop':>10}{'align s':>9}{'curve s':>9}"]
    for method, r in result["results"].items():
        mid = r["loss_midpoint"]
        rows.append(f"{method:<{w}}{r['loss_endpoints'][0]:>9.4f}{r['loss_endpoints'][1]:>9.4f}"
                    f"{(mid if mid is not None else float('nan')):>9.4f}{r['loss_barrier']:>10.4f}"
                    f"{_se(r.get('loss_barrier_se')):>8}{r['loss_barrier_mean']:>9.4f}{100 * r['acc_drop']:>9.2f}%"
                    f"{r['align_seconds']:>9.1f}{r['curve_seconds']:>9.1f}")
    notes = []
    first = next(iter(result["results"].values()), {})
    if first.get("n_predictions"):
        notes.append(f"± se: standard error over {first['n_batches']} evaluation batches "
                     f"({first['n_predictions']:,} {first.get('unit', 'predictions')})")
    for method, r in result["results"].items():
        if isinstance(r.get("over_seeds"), dict):
            s = r["over_seeds"]["loss_barrier"]
            notes.append(f"{method} over {s['n']} seeds: barrier {s['mean']:.4f} ± {_se(s['se']).strip()} (se; sd "
                         f"{_se(s['sd']).strip()})")
    return "\n".join(rows + notes)


def _se(value) -> str:
    return "  n/a" if value is None else f"{value:.4f}"


def format_decompositions(result: dict) -> str:
    return "\n\n".join(f"decomposition, {method}:\n{format_decomposition(r['decomposition'])}"
                       for method, r in result["results"].items() if r.get("decomposition"))


def write_csv(result: dict, path) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "lambda", "loss", "acc"])
        for method, r in result["results"].items():
            for lam, loss, acc in zip(r["lambdas"], r["loss"], r["acc"]):
                w.writerow([method, f"{lam:.6g}", f"{loss:.8g}", f"{acc:.8g}"])
