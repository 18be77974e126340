"""Loss and accuracy along the linear path between two models, and the barrier metrics the field reports.

Barriers (L = loss, A = accuracy, λ on the grid):
  loss_barrier           max_λ L(λ) − [(1−λ)·L(0) + λ·L(1)]          (the paper's)
  loss_barrier_mean      max_λ L(λ) − [L(0) + L(1)]/2                 (Git Re-Basin's)
  acc_drop               max_λ [(1−λ)·A(0) + λ·A(1)] − A(λ)
  acc_drop_mean          [A(0) + A(1)]/2 − min_λ A(λ)

Standard errors over evaluation batches (when the curve holds per-batch sums, "batch_stats"): every metric above
is a ratio of sums over batches, Σ_b y_b / Σ_b n_b (n_b: the predictions counted in batch b — target tokens for a
language model, images for a classifier), with y_b the batch's own excess at the metric's worst λ (held fixed:
the error of the choice of λ is not included). Its standard error is the cluster (batch-level) one,
sqrt(B/(B−1)·Σ_b (y_b − r·n_b)²) / Σ_b n_b with r the ratio; batches share every λ, so the pairing of the path
with its endpoints is kept. `loss_se` and `acc_se` give the same for the loss and the accuracy at each λ.
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


@torch.no_grad()
def evaluate_per_batch(model, batches: list, task: str) -> dict:
    """evaluate_batches' figures and each batch's own: {"loss", "acc", "loss_sum": [..], "correct": [..], "n": [..]}
    (the sums over every process under a launch)."""
    rows = [summed(model, [b], task) for b in batches]
    total, correct, n = (sum(r[i] for r in rows) for i in range(3))
    return {"loss": total / n, "acc": correct / n, "loss_sum": [r[0] for r in rows], "correct": [r[1] for r in rows],
            "n": [r[2] for r in rows]}


def path_curve(models: list, batches: list, task: str, points: int = 11, progress: bool = True,
               label: str = "", dtype=None) -> dict:
    """Loss/accuracy at each λ of the grid on the same batches, the working model in `dtype` (None: the
    endpoints'; glmc/paths/interpolate.py). Returns {"lambdas", "loss", "acc", "seconds"}."""
    interp = Interpolation(models, dtype)
    lams = lambda_grid(points)
    out: dict = {"lambdas": lams, "loss": [], "acc": []}
    stats: dict = {"n": None, "loss_sum": [], "correct": []}
    t0 = time.perf_counter()
    bar = tqdm(lams, desc=f"barrier {label}".strip(), disable=not (progress and distributed.is_main()), leave=False)
    for lam in bar:
        r = evaluate_per_batch(interp.set(lam), batches, task)
        out["loss"].append(r["loss"])
        out["acc"].append(r["acc"])
        stats["n"] = r["n"]
        stats["loss_sum"].append(r["loss_sum"])
        stats["correct"].append(r["correct"])
        bar.set_postfix(lam=f"{lam:.2f}", loss=f"{r['loss']:.4f}")
    out["seconds"] = time.perf_counter() - t0
    out["batch_stats"] = stats
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
        **standard_errors(curve, i, j),
    }


def standard_errors(curve: dict, i: int, j: int) -> dict:
    """The metrics' standard errors over evaluation batches (see the module docstring), at the loss barrier's λ
    index `i` and the accuracy drop's `j`; {} without per-batch sums, None for fewer than two batches."""
    stats = curve.get("batch_stats")
    if not stats or not stats.get("n"):
        return {}
    lams, n, sums, right = curve["lambdas"], stats["n"], stats["loss_sum"], stats["correct"]
    total = sum(n)
    out: dict = {"n_batches": len(n), "n_predictions": total}
    if len(n) < 2:
        return {**out, "loss_barrier_se": None, "loss_barrier_mean_se": None, "acc_drop_se": None,
                "acc_drop_mean_se": None, "loss_se": [None] * len(lams),
                "acc_se": [None] * len(lams)}

    def se(y):  # y_b: a batch's sum of the quantity (its own mean times n_b)
        r = sum(y) / total
        return (len(n) / (len(n) - 1) * sum((yb - r * nb) ** 2 for yb, nb in zip(y, n))) ** 0.5 / total

    last = len(lams) - 1
    m = max(range(len(lams)), key=lambda k: sum(sums[k]))
    a = min(range(len(lams)), key=lambda k: sum(right[k]))
    t, u = lams[i], lams[j]
    return {**out,
            "loss_se": [se(sums[k]) for k in range(len(lams))],
            "acc_se": [se(right[k]) for k in range(len(lams))],
            "loss_barrier_se": se([s - ((1 - t) * s0 + t * s1) for s, s0, s1 in zip(sums[i], sums[0], sums[last])]),
            "loss_barrier_mean_se": se([s - (s0 + s1) / 2 for s, s0, s1 in zip(sums[m], sums[0], sums[last])]),
            "acc_drop_se": se([(1 - u) * c0 + u * c1 - c for c, c0, c1 in zip(right[j], right[0], right[last])]),
            "acc_drop_mean_se": se([(c0 + c1) / 2 - c for c, c0, c1 in zip(right[a], right[0], right[last])])}


def _at(curve, lam, key):
    for t, v in zip(curve["lambdas"], curve[key]):
        if abs(t - lam) < 1e-9:
            return v
    return None
