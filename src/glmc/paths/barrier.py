"""Loss and accuracy along the linear path between two models, and the barrier metrics the field reports.

Barriers (L = loss, A = accuracy, λ on the grid):
  loss_barrier           max_λ L(λ) − [(1−λ)·L(0) + λ·L(1)]          (the paper's)
  loss_barrier_mean      max_λ L(λ) − [L(0) + L(1)]/2                 (Git Re-Basin's)
  acc_drop               max_λ [(1−λ)·A(0) + λ·A(1)] − A(λ)
  acc_drop_mean          [A(0) + A(1)]/2 − min_λ A(λ)
"""

from __future__ import annotations

import time

import torch
from tqdm.auto import tqdm

from glmc import distributed
from glmc.errors import BadOption
from glmc.models.evaluate import summed
from glmc.paths.interpolate import Interpolation


def lambda_grid(points: int) -> list[float]:
    if points < 2:
        raise BadOption("a path needs at least 2 points (its endpoints)")
    return [i / (points - 1) for i in range(points)]


@torch.no_grad()
def evaluate_batches(model, batches: list, task: str) -> dict:
    """Mean loss and accuracy; under a multi-process launch each process evaluates its share of every batch
    (glmc/models/evaluate.py `summed`), and every process gets the whole figures."""
    total, correct, n = summed(model, batches, task)
    return {"loss": total / n, "acc": correct / n}


def path_curve(models: list, batches: list, task: str, points: int = 11, progress: bool = True,
               label: str = "", dtype=None) -> dict:
    """Loss/accuracy at each λ of the grid on the same batches, the working model in `dtype` (None: the
    endpoints'; glmc/paths/interpolate.py). Returns {"lambdas", "loss", "acc", "seconds"}."""
    interp = Interpolation(models, dtype)
    lams = lambda_grid(points)
    out = {"lambdas": lams, "loss": [], "acc": []}
    t0 = time.perf_counter()
    bar = tqdm(lams, desc=f"barrier {label}".strip(), disable=not (progress and distributed.is_main()), leave=False)
    for lam in bar:
        r = evaluate_batches(interp.set(lam), batches, task)
        out["loss"].append(r["loss"])
        out["acc"].append(r["acc"])
        bar.set_postfix(lam=f"{lam:.2f}", loss=f"{r['loss']:.4f}")
    out["seconds"] = time.perf_counter() - t0
    return out


def barrier_metrics(curve: dict) -> dict:
    lams, loss, acc = curve["lambdas"], curve["loss"], curve["acc"]
    la, lb, aa, ab = loss[0], loss[-1], acc[0], acc[-1]
    excess = [loss_value - ((1 - t) * la + t * lb) for t, loss_value in zip(lams, loss)]
    drop = [((1 - t) * aa + t * ab) - a for t, a in zip(lams, acc)]
    i = max(range(len(lams)), key=lambda k: excess[k])
    j = max(range(len(lams)), key=lambda k: drop[k])
    return {
        "loss_barrier": max(excess),
        "loss_barrier_lambda": lams[i],
        "loss_barrier_mean": max(loss) - (la + lb) / 2,
        "acc_drop": max(drop),
        "acc_drop_lambda": lams[j],
        "acc_drop_mean": (aa + ab) / 2 - min(acc),
        "loss_endpoints": [la, lb],
        "acc_endpoints": [aa, ab],
        "loss_midpoint": _at(curve, 0.5, "loss"),
    }


def _at(curve, lam, key):
    for t, v in zip(curve["lambdas"], curve[key]):
        if abs(t - lam) < 1e-9:
            return v
    return None
