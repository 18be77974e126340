"""Weight matching's candidates, chosen by the loss at the middle of the path.

Weight matching's alternation ends in one of many nearly tied optima of the weight distance, and which one it
reaches decides much of the barrier (decision D1: on the suite's ViTs a one-ulp change of the residual
fit moved a pair by four points of the vanilla barrier), and the distance it minimises does not tell the
optima apart (the restart it keeps is the closest, not the best). The model's own data can: when weight matching
is given data, it runs every candidate alternation of `CANDIDATES` (each data-free) and keeps the transform whose
midpoint, θ(½) = (A + π(B))/2 in the mode's parametrisation, has the lowest mean loss on `batches` batches of the
**training** split. Those batches are never the validation or test split a barrier is reported on.

Costs: one alternation per candidate, and one interpolated forward pass over the batches per candidate (a few
seconds at the suite's sizes); `weight.align` selects by default only up to SELECT_UP_TO parameters.
"""

from __future__ import annotations

import time

import torch

from glmc.errors import BadData, BadOption
from glmc.matching.alternation import weight_matching
from glmc.matching.common import canonical_pair, finish
from glmc.matching.paper import fits_head_maps, paper_transform, runs_on
from glmc.matching.residual_fit import residual_kind, seen_token_rows, streamed_distance
from glmc.models.evaluate import model_device
from glmc.paths.barrier import evaluate_batches
from glmc.paths.interpolate import Interpolation
from glmc.symmetry.transform import apply_elements
from glmc.view.circuit import circuit_model

# name -> (algorithm, its options). "glmc" runs glmc's alternation from its two first residual maps (the norms
# weighting's fit and the unweighted one) and gives one candidate per start; "paper", the paper's alternation
# (glmc/matching/paper.py), followed in native mode by the per-head maps. The others are the variants of
# decision D1 that helped some tuning pairs and hurt others.
CANDIDATES = {
    "glmc": ("glmc", {"restarts": 2}),
    "paper": ("paper", {}),
    "glmc-l1": ("glmc", {"unit_similarity": "l1"}),
    "glmc-unweighted": ("glmc", {"weighting": "none"}),
}
# all four (decision D4)
DEFAULT_CANDIDATES = tuple(CANDIDATES)
BATCH_SIZE = 32


def parse_candidates(candidates) -> tuple[str, ...]:
    names = tuple(c.strip() for c in candidates.split(",") if c.strip()) if isinstance(candidates, str) \
        else tuple(candidates)
    unknown = [c for c in names if c not in CANDIDATES]
    if unknown or not names:
        raise BadOption(f"unknown weight-matching candidate(s) {', '.join(unknown) or '(none given)'}; choose from "
                        f"{', '.join(CANDIDATES)}")
    return names


def usable_candidates(candidates, arch) -> tuple[str, ...]:
    """The candidates this architecture can run. The paper's alternation needs plain multi-head attention, so
    the default set leaves it out for grouped-query models; naming it there is refused."""
    if candidates is None:
        return tuple(n for n in DEFAULT_CANDIDATES if CANDIDATES[n][0] != "paper" or runs_on(arch))
    names = parse_candidates(candidates)
    if not runs_on(arch) and any(CANDIDATES[n][0] == "paper" for n in names):
        raise BadOption(f"the candidate 'paper' needs plain multi-head attention; this {arch.family} model declares "
                        "no head permutation group (leave 'paper' out of --candidates)")
    return names


def candidate_transforms(view_a, view_b, arch, names, *, iterations, residual, tol, rows, head_maps, progress):
    """[(name, π, weight-distance log)] for every candidate alternation in `names`."""
    found = []
    for name in names:
        algorithm, options = CANDIDATES[name]
        if algorithm == "paper":
            t, log = paper_transform(view_a, view_b, arch, iterations, residual, rows, progress, head_maps)
            found.append((name, t, log))
            continue
        ts, log = weight_matching(view_a, view_b, arch, iterations, residual, head_maps, progress, tol=tol,
                                  every_start=True, **options)
        for r, t in enumerate(ts):
            found.append((f"{name}/start{r + 1}" if len(ts) > 1 else name, t, log))
    return found


def training_batches(data, n: int) -> list:
    batches = list(data.batches("train", BATCH_SIZE, max_batches=n, shuffle=False))
    if not batches:
        raise BadData("the data's training split has no batch to choose weight matching's candidate on; give more "
                      "training data, or --select-batches 0")
    return batches


@torch.no_grad()
def midpoint_loss(canon_a, model_b, adapter, arch, view_b, transform, batches, task, mode) -> float:
    """Mean loss of (A + π(B))/2 on `batches`, interpolated natively or in circuit form (`mode`)."""
    moved = apply_elements(view_b, transform.elements, arch)
    ends = [canon_a, adapter.from_canonical(moved, model_b, consume=True).to(model_device(model_b))]
    if mode == "circuit":
        ends = [circuit_model(e) for e in ends]
    return evaluate_batches(Interpolation(ends).set(0.5), batches, task)["loss"]


def align_selected(model_a, model_b, *, data, batches: int, candidates, iterations, residual, tol, mode,
                   head_maps, progress):
    """weight.align with candidate selection (module docstring)."""
    adapter, arch, view_a, view_b = canonical_pair(model_a, model_b)
    names = usable_candidates(candidates, arch)
    if mode == "circuit":
        adapter.io_spec(model_a)  # a model without a circuit form (RoPE, register tokens, …) is refused by name
    head_maps = fits_head_maps(head_maps, mode, arch)
    t0 = time.perf_counter()
    rows = seen_token_rows(data, view_a)  # the paper's residual fit uses the seen tokens' rows (paper.py)
    found = candidate_transforms(view_a, view_b, arch, names, iterations=iterations, residual=residual, tol=tol,
                                 rows=rows, head_maps=head_maps, progress=progress)
    t1 = time.perf_counter()
    chosen_batches = training_batches(data, batches)
    canon_a = adapter.from_canonical(view_a, model_a).to(model_device(model_a))
    scored = []
    for name, t, _ in found:
        loss = midpoint_loss(canon_a, model_b, adapter, arch, view_b, t, chosen_batches, data.task, mode)
        scored.append({"name": name, "midpoint_loss": loss,
                       "distance": streamed_distance(view_a, view_b, t.elements, arch)})
    del canon_a
    best = min(range(len(found)), key=lambda i: scored[i]["midpoint_loss"])
    name, t, log = found[best]
    report = {"method": "weight", "mode": mode, "algorithm": "select", "chosen": name,
              "residual": residual_kind(arch, residual), "head_maps": head_maps,
              "select": {"split": "train", "batches": len(chosen_batches), "candidates": scored,
                         "alternation_seconds": t1 - t0, "scoring_seconds": time.perf_counter() - t1},
              "iterations": log, "transform": t.describe(), "distance_before": log[0]["distance"]}
    return finish(model_a, model_b, adapter, arch, view_a, view_b, t, report)
