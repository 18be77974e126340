"""Loss over the simplex of k models: θ(λ) = Σ λ_m·θ_m, and the multi-model barrier
max_λ [L(θ(λ)) − Σ λ_m·L(θ_m)] (the paper's Fig. 4 for k = 3)."""

from __future__ import annotations

import random
import time

from tqdm.auto import tqdm

from glmc import distributed
from glmc.paths.barrier import evaluate_batches
from glmc.paths.interpolate import Interpolation


def simplex_points(k: int, resolution: int = 10, samples: int = 64, seed: int = 0) -> list[tuple]:
    """k = 2: the line grid; k = 3: the triangular grid with `resolution` steps per edge; k > 3: the vertices,
    the centre, the edge midpoints and `samples` Dirichlet(1) draws."""
    if k == 2:
        return [(1 - i / resolution, i / resolution) for i in range(resolution + 1)]
    if k == 3:
        return [(i / resolution, j / resolution, (resolution - i - j) / resolution)
                for i in range(resolution + 1) for j in range(resolution + 1 - i)]
    rng = random.Random(seed)
    pts = [tuple(float(i == m) for i in range(k)) for m in range(k)] + [tuple([1 / k] * k)]
    pts += [tuple(0.5 * (i in (a, b)) for i in range(k)) for a in range(k) for b in range(a + 1, k)]
    for _ in range(samples):
        g = [rng.expovariate(1.0) for _ in range(k)]
        pts.append(tuple(x / sum(g) for x in g))
    return pts


def simplex_surface(models: list, batches: list, task: str, resolution: int = 10, samples: int = 64,
                    progress: bool = True, label: str = "", dtype=None) -> dict:
    interp = Interpolation(models, dtype)
    pts = simplex_points(len(models), resolution, samples)
    out = {"points": pts, "loss": [], "acc": []}
    t0 = time.perf_counter()
    for w in tqdm(pts, desc=f"simplex {label}".strip(), disable=not (progress and distributed.is_main()),
                  leave=False):
        r = evaluate_batches(interp.set(list(w)), batches, task)
        out["loss"].append(r["loss"])
        out["acc"].append(r["acc"])
    out["seconds"] = time.perf_counter() - t0
    return out


def simplex_metrics(surface: dict) -> dict:
    pts, loss = surface["points"], surface["loss"]
    k = len(pts[0])
    vertex_loss = [loss[pts.index(tuple(float(i == m) for i in range(k)))] for m in range(k)]
    excess = [loss_value - sum(w * v for w, v in zip(p, vertex_loss)) for p, loss_value in zip(pts, loss)]
    i = max(range(len(pts)), key=lambda j: excess[j])
    centre = min(range(len(pts)), key=lambda j: max(abs(x - 1 / k) for x in pts[j]))
    return {"barrier": excess[i], "barrier_at": list(pts[i]), "vertex_loss": vertex_loss, "excess": excess,
            "centre_excess": excess[centre]}
