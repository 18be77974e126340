"""Many models: alignment to a shared universe, joint refinement on the simplex, and the merged model.

Universe (weight matching): U ← canonical θ_1; repeat `rounds` times: align every model to U (the first
round leaves model 1 as it is), U ← Σ w_m·π_m(θ_m). Orthogonal residual maps and per-head invertible maps are
used, not only permutations. Optional refinement (`method="learned"`): the transforms of models 2…k are
trained jointly with λ drawn on the simplex (the paper's Eq. 2), model 1 staying the reference.

Refinement defaults differ from the paper's (Dirichlet(0.1), lr 3e-4, ~10 epochs) because they measured better
within a few hundred CPU steps (decision D14): λ ~ Dirichlet(1) (uniform on the
simplex; Dirichlet(0.1) puts most draws next to a vertex, where the loss does not depend on the transforms, so
most steps carry no gradient), lr 1e-2, and the best state chosen on the worst of the centre and the edge
midpoints (the grid barrier usually sits on the edge between two moved models). benchmarks/many_models.py
measures the default against Dirichlet(0.1) (benchmarks/results/many_models-simplex.md); `concentration=0.1,
lr=3e-4` with more steps is the paper's setting.
"""

from __future__ import annotations

import time

from glmc.errors import BadOption, IncompatibleModels
from glmc.matching.alternation import weight_matching
from glmc.matching.common import (
    FUNCTION_TOL,
    PARK_TENSORS_FROM,
    canonical_cpu_view,
    check_compatible,
    check_options,
    layer_chunks,
    max_logit_change,
    model_device,
    model_shape,
    move_consuming,
    squared_norm,
)
from glmc.matching.learned import SIMPLEX_DEFAULTS, LearnedMatcher
from glmc.matching.nullspace import fill_exact, free_probes
from glmc.memory import is_parked, park, release_keys, trim
from glmc.methods import method as method_record
from glmc.methods import names
from glmc.options import MergeOptions as M
from glmc.symmetry.transform import Transform, apply_elements
from glmc.view.model_ops import widen_model


def canonical_views(models: list):
    for m in models[1:]:
        adapter, arch = check_compatible(models[0], m)
    return adapter, arch, [canonical_cpu_view(adapter, m, park_big=True) for m in models]


def average(views: list, weights) -> dict:
    return {k: sum(w * v[k].double() for w, v in zip(weights, views)).float() for k in views[0]}


def moved_average(views: list, transforms: list, weights, arch) -> tuple[dict, float]:
    """(Σ_m w_m·π_m(θ_m), Σ_m ‖π_m(θ_m) − that average‖²), one block at a time: no model gets a moved copy of its
    own, so merging k models holds their k views and the average, not 2k + 1 model-sized copies."""
    out, spread = {}, 0.0
    for keys in layer_chunks(views[0], arch.n_layer):
        parked = any(is_parked(v[k]) for v in views for k in keys)
        # exact moves (not moved_part's scoring precision): the average is written
        parts = [apply_elements({k: v[k] for k in keys}, t.elements, arch, strict=False)
                 for t, v in zip(transforms, views)]
        avg = average(parts, weights)
        spread += sum(squared_norm(p[k], avg[k]) for p in parts for k in keys)
        release_keys(keys, *views)
        if parked:  # big models: the average waits on disk too, beside the views it came from
            park(avg, keys, min_elements=PARK_TENSORS_FROM)
        out.update(avg)
        trim()
    return out, spread


def universe_alignment(views: list, arch, weights=None, rounds: int = M.rounds, iterations: int = M.iterations,
                       progress=False,
                       balanced: bool = True):
    """(transforms, per-round log): transforms[m] brings model m into the shared universe (transforms[0] is the
    identity after the first round unless later rounds move model 1 too). `balanced`: weight matching's
    residual fit (glmc/matching/alternation.py)."""
    k = len(views)
    weights = weights or [1.0 / k] * k
    transforms = [Transform() for _ in views]
    universe = views[0]
    log = []
    for r in range(rounds):
        t0 = time.perf_counter()
        for m in range(k):
            if r == 0 and m == 0:
                continue
            transforms[m], _ = weight_matching(universe, views[m], arch, iterations, progress=progress,
                                               balanced=balanced)
        universe, spread = moved_average(views, transforms, weights, arch)
        log.append({"round": r + 1, "spread": spread, "seconds": time.perf_counter() - t0})
    return transforms, log


def merge_models(models: list, method: str = "weight", weights=None, rounds: int = M.rounds,
                 iterations: int = M.iterations, data=None, progress=M.progress, mode: str = M.mode,
                 null_space: str = M.null_space, balanced=None,
                 **learned_options):
    """(merged native model, aligned native models, their transforms, report). Every aligned model is checked to
    keep its function (max |Δlogits| in the report). Embedded narrower models get their free reader weights from
    the weighted average of the full-width ones (`null_space="fixed"`, glmc/matching/nullspace.py; "off": zeros).
    Results are placed on the first model's device; the inputs are neither moved nor modified.
    `learned_options` go to the refinement (LearnedMatcher.fit: steps, lr, concentration, …) and are only used
    with a method that trains (learned); a name fit does not take raises TypeError."""
    record = method_record(method)
    if record.merge is None:
        raise BadOption(f"glmc cannot merge with {method!r}; choose {', '.join(names(merges=True))}")
    refine = record.trains  # universe weight matching, then (learned) every transform trained on the simplex
    if "train_batch_size" in learned_options:  # MergeOptions' name for the training batch size
        learned_options["batch_size"] = learned_options.pop("train_batch_size")
    check_options("learned refinement", LearnedMatcher.fit, learned_options)
    models, template, widened = _common_width(models)
    adapter, arch, views = canonical_views(models)
    k = len(models)
    weights = weights or [1.0 / k] * k
    if abs(sum(weights) - 1) > 1e-6:
        raise BadOption(f"merge weights must sum to 1, got {weights}")
    if balanced is None:  # learned refinement starts from the unweighted fit, as pairs do (glmc/matching/learned.py)
        balanced = not refine
    transforms, log = universe_alignment(views, arch, weights, rounds, iterations, progress, balanced)
    report = {"method": method, "weights": weights, "universe": log, "widened": widened}
    if refine:
        transforms, fit = refine_on_simplex(models, views, adapter, arch, transforms, data, progress, mode,
                                            **learned_options)
        report["learned"] = fit
    if null_space == "fixed" and widened and len(widened) < k:
        aligned_views = [t.apply(v, arch) if t.elements else v for t, v in zip(transforms, views)]
        aligned_views, fills = _fill_widened(aligned_views, views, transforms, widened, weights, arch)
        # model index -> {key: tensor added after its transform}; tensors, popped by the CLI (not JSON)
        report.update(null_space="fixed", fills=fills)
        merged_view = average(aligned_views, weights)
    else:  # streamed: the average first, then each view is moved and rebuilt as it is consumed
        if null_space == "fixed":  # nothing was embedded, so nothing to fill (before: three whole-model copies)
            report.update(null_space="fixed", fills={})
        merged_view, _ = moved_average(views, transforms, weights, arch)
        aligned_views = [move_consuming(v, t, arch, keep_parked=True) if t.elements else v
                         for t, v in zip(transforms, views)]
    del views
    # each view is consumed by its rebuild, so the views and the models are never all held at once
    aligned = [adapter.from_canonical(v, m, consume=True).to(model_device(m)) for v, m in zip(aligned_views, models)]
    report["max_dlogits"] = [max_logit_change(m, a) for m, a in zip(models, aligned)]
    if not max(report["max_dlogits"]) <= FUNCTION_TOL:
        raise RuntimeError(f"merge changed an aligned model's function: max |Δlogits| {max(report['max_dlogits']):.3g}"
                           f" > {FUNCTION_TOL:g} (a bug: please report it with the models' configs)")
    merged = adapter.from_canonical(merged_view, template, consume=True).to(model_device(models[0]))
    return merged, aligned, transforms, report


def _fill_widened(aligned_views, views, transforms, widened, weights, arch):
    """(views, fills): each embedded model's free weights set to the weighted average of the models that were not
    embedded, so the merge keeps those weights whole instead of diluting them with the embedding's zeros."""
    full = [m for m in range(len(views)) if m + 1 not in widened]
    target = average([aligned_views[m] for m in full], [weights[m] / sum(weights[j] for j in full) for m in full])
    out, fills = list(aligned_views), {}
    for m in (i - 1 for i in widened):
        out[m], fills[m] = fill_exact(target, out[m], free_probes(views[m], arch.n_layer), transforms[m], arch)
    return out, fills


def _common_width(models):
    """Models embedded exactly into the widest one's architecture (glmc/view/widen.py); (models, widest, which)."""
    shapes = [model_shape(m) for m in models]
    widest = max(range(len(models)), key=lambda i: shapes[i][1:])
    w = shapes[widest]
    out, widened = [], []
    for i, (m, s) in enumerate(zip(models, shapes)):
        if s == w:
            out.append(m)
            continue
        if s[0] != w[0] or any(x > y for x, y in zip(s, w)):
            raise IncompatibleModels(f"model {i + 1} {s} cannot be embedded into the widest model {w} (same depth, "
                                     "every width at most the widest's)")
        out.append(widen_model(m, w[1], n_head=w[2], d_mlp=w[4]).to(model_device(m)))
        widened.append(i + 1)
    return out, models[widest], widened


def refine_on_simplex(models, views, adapter, arch, transforms, data, progress=True, mode="native", **options):
    """Joint learned refinement: model 1 fixed (moved into the universe first), models 2…k learned."""
    if data is None:
        raise ValueError("learned refinement trains on data (the models' glmc.json or --data)")
    # the latents for model m start at the universe transform of m composed with the inverse of model 1's
    rel = [transforms[m] if not transforms[0].elements else transforms[m].then(transforms[0].inverse(arch), arch)
           for m in range(1, len(views))]
    template = adapter.from_canonical(views[0], models[0])
    matcher = LearnedMatcher([views[0]] + views[1:], adapter, arch, template, data, rel,
                             device=model_device(models[0]), mode=mode)
    options = {**SIMPLEX_DEFAULTS, **{k: v for k, v in options.items() if v is not None}}
    fit = matcher.fit(progress=progress, **options)
    learned = fit.pop("transforms")
    fit.pop("targets")
    return [Transform()] + learned, {**fit, **options}
