"""glmc's weight-matching alternation (data-free), in the native architecture.

Minimises the weight distance Σ_t ‖A_t − π(B)_t‖² over the symmetry group, alternating:
  1. residual map O given the inner maps: orthogonal Procrustes over every residual-touching tensor (rows
     stacked, residual axis last), restricted to maps that fix the all-ones direction: with U a basis of 1^⊥,
     O = 11ᵀ/d + U·R·Uᵀ and R = polar(Uᵀ·M·U), M = Σ_t π_inner(B_t)ᵀ·A_t / (‖A_t‖·‖B_t‖): every tensor weighs
     the same, whatever its scale, so a few large ones (a position table, a classifier) cannot decide the map
     alone. (`residual="permutation"`: linear assignment on M.) The first O uses only the input-side writers
     (token/patch/position embeddings, class token), the one place the stream's basis is pinned before any
     block is matched. These two choices, and
     learned matching's start from the unweighted fit (`balanced=False`), are decision D1 (docs/decisions/).
  2. per layer, given O: heads by linear assignment on ⟨QK_A,h, QK_B,j⟩ + ⟨OV_A,h, OV_B,j⟩ with bias-augmented
     circuits, computed from d_head×d_head Gram blocks (⟨XᵀY, X′ᵀY′⟩ = Σ (X·X′ᵀ) ⊙ (Y·Y′ᵀ)), never d×d;
  3. per head, invertible maps that bring B's factors onto A's: with C = Aᵀ acting as q ↦ C·q, k ↦ C^-T·k
     (likewise D = Bᵀ on v and o), minimise ‖C·Q_B − Q_A‖²/‖Q_A‖² + ‖C^-T·K_B − K_A‖²/‖K_A‖². Solver: the best
     of three closed-form starts (orthogonal Procrustes on [Q K] stacked; least squares on Q alone; on K alone),
     then L-BFGS in GL(d_head) (float64); a refined map is kept only if it lowers the objective and its
     condition number stays below 1e4;
  4. per layer, MLP units by linear assignment on ⟨W_in⟩ + b_in·b_in′ + ⟨W_out⟩.
Grouped-query attention (declared `kv_heads` / `query_heads`): the same circuit similarity per query head (with
its group's key and value head); key/value groups by linear assignment on the sum of each group pair's best
within-group query assignment, then that assignment inside the groups; per-kv-head maps are fitted on the factors
of all their query heads side by side. Under RoPE (`scale-rotation` QK maps) heads are compared on their per-plane
circuits (rotary_circuit_similarity), which see exactly what rotary attention computes (chosen on the Llama
tuning pair, decision D10), so it is the default. The head comparison and the per-head fit of each role belong to
its declared kind (Kind.head_similarity, head_problem / solve_head_problems; glmc/symmetry/kinds, solvers.py), so a
new kind brings its own. `scale-rotation` QK maps are solved per rotary plane in closed form
(a complex scale c = a + ib; best of the Q-side and K-side least squares and their geometric mean). A gated MLP
with a declared per-unit scale matches units on the gate's inner products plus |cosine| of up and down rows (blind to
the per-unit scale), then fits each unit's scale in closed form the same way (real c).
With data and below 2^25 parameters, align runs several alternations and keeps the one whose path midpoint has
the lowest training loss (glmc/matching/select.py). Otherwise circuit mode, and GPT-2 below 2^25 parameters (its
declared Arch.weight_matching), run the paper's own alternation instead (glmc/matching/paper.py; `algorithm`,
resolve_algorithm).
Stops when an iteration lowers the relative distance by less than `tol` (3e-3 for the weight method, TOL), or
after `iterations`. Memory: the alternation walks the model one block at a time (layer_chunks), never holding a
transformed copy of the whole model; big similarities and residual crosses are float32 products with float64
sums; every layer's per-head invertible maps are fitted in one batched L-BFGS run on k×k Gram blocks; MLP
assignments run in background threads while the next layer's similarity is formed.
"""

from __future__ import annotations

import time

import torch
from tqdm.auto import tqdm

from glmc.errors import BadOption
from glmc.matching.assignments import LSA_QUEUED, LSA_WORKERS, Assignments
from glmc.matching.common import layer_chunks, residual_keys, view_distance
from glmc.matching.declared import match_declared
from glmc.matching.heads import centred_scores, head_factors, match_grouped_heads, match_heads
from glmc.matching.mlp_units import (
    UNIT_SIMILARITIES,
    fit_mlp_scale,
    gated,
    gated_mlp_similarity,
    mlp_similarity,
    ranked_in_bfloat16,
)
from glmc.matching.residual_fit import (
    WEIGHTINGS,
    ResidualPass,
    cross_correlation,
    moved_part,
    residual_kind,
    solve_residual,
    streamed_distance,
)
from glmc.memory import park, release_keys, trim
from glmc.options import WeightOptions
from glmc.symmetry.elements import IndexMap, LinearMap, ScaleMap
from glmc.symmetry.spec import group_name
from glmc.symmetry.structure import STREAM, structure
from glmc.symmetry.transform import Transform, apply_elements

HEAD_SIMILARITIES = ("auto", "circuit")
INIT_KEYS = ("embed", "pos_embed", "patch.w", "patch.b", "cls", "registers")
RAW_INIT_KEYS = INIT_KEYS + ("head.w",)  # balanced=False: the unweighted variant also starts from the head


def start_keys(view) -> tuple:
    """The tensors the first residual map is fitted on. Without a position table (rotary positions) the token
    embeddings are the only input-side anchor, a few dozen rows of a char vocabulary for a d-dimensional stream,
    so the first map is mostly unconstrained; the untied LM head, whose rows are the same tokens, pins more of
    it (decision D10); with a position table it stays off."""
    return INIT_KEYS if "pos_embed" in view else INIT_KEYS + ("head.w",)



def _grouped(t: torch.Tensor, b: int) -> torch.Tensor:
    """[H, k, m] per query head → [b, k, r·m]: the factors of a group's r query heads side by side."""
    h, k, m = t.shape
    return t.reshape(b, h // b, k, m).permute(0, 2, 1, 3).reshape(b, k, -1)


def match_inner(view_a, view_b, arch, head_maps: bool = True, head_similarity: str = "auto",
                residual=None, centred_keys: bool = False, unit_similarity: str = "inner",
                permutations: bool = True) -> Transform:
    """Heads, per-head maps and MLP units, per layer, for the groups the model declares (their structure read off
    the declarations: glmc/symmetry/structure.py), between A and B moved by the residual element `residual` (None:
    B as it is), one block at a time. `head_similarity`: "auto" (per rotary plane where the score maps are
    scale-rotations) or "circuit" (the whole QK circuit); `centred_keys`: heads compared on what their scores see
    (score_keys); `unit_similarity`: UNIT_SIMILARITIES (plain MLPs); `permutations=False`: B's heads and units stay
    where they are (only the per-head maps and unit scales are fitted)."""
    groups, t = arch.groups, Transform()
    found = structure(groups)
    heads, mlp = found.heads, found.units
    stream = {} if residual is None else {STREAM: residual}
    chunks = layer_chunks(view_b, arch.n_layer)
    pending: dict[str, list] = {}  # role -> (layer, its Kind's head problem), solved after the loop
    units = Assignments(LSA_WORKERS, LSA_QUEUED)
    # a gated MLP's rotated up/down rows wait here for the layer's unit assignment, then fit its per-unit scales:
    # rotating them again afterwards cost a 1.1B Llama 12 s an iteration; at most the assignments in flight wait
    rotated_mlp: dict[int, dict] = {}
    unit_perms: dict[int, IndexMap | None] = {}
    scales: dict[int, ScaleMap] = {}

    def fit_scales(done: dict) -> None:
        for j, perm in done.items():
            unit_perms[j] = perm
            if j in rotated_mlp:
                part = rotated_mlp.pop(j)
                moved = part if perm is None else apply_elements(part, {group_name(mlp.order, j): perm}, arch,
                                                                 strict=False)
                scales[j] = fit_mlp_scale(view_a, moved, mlp, j)
                release_keys(part, view_a)

    for i in range(arch.n_layer):
        # what only the bfloat16 unit ranking reads is moved in bfloat16 (the rest in float32)
        low = ranked_in_bfloat16(view_a, view_b, mlp, i, unit_similarity) if permutations and mlp else ()
        rotated_b = moved_part(view_b, chunks[i], stream, arch, low)
        if heads is not None:
            _match_heads(view_a, rotated_b, arch, heads, i, t.elements, pending, head_maps=head_maps,
                         head_similarity=head_similarity, centred_keys=centred_keys, permutations=permutations)
        is_gated = mlp is not None and gated(view_a, mlp, i)
        if is_gated:
            rotated_mlp[i] = {k: v for k, v in rotated_b.items() if k.startswith(mlp.prefixes(i)[:2])}
        if mlp is not None and permutations:
            units.submit(i, gated_mlp_similarity(view_a, rotated_b, mlp, i) if is_gated
                         else mlp_similarity(view_a, rotated_b, mlp, i, unit_similarity))
            del rotated_b
            fit_scales(units.take_done())
        else:  # without permutations B's units stay where they are, and a gated MLP's scales are still fitted
            fit_scales({i: None})
        release_keys(chunks[i], view_a, view_b)
    # the per-head fits first: they need no unit assignment, so they run while the last ones are solved
    head_maps_found = {}
    for role, parts in pending.items():
        maps = groups[role].group().solve_head_problems([p for _, p in parts])
        for (i, _), c in zip(parts, maps, strict=True):
            head_maps_found[group_name(role, i)] = LinearMap(c.transpose(-1, -2).float().contiguous())
        trim()  # L-BFGS's history and line-search temporaries
    fit_scales(units.results())
    trim()  # the similarities and costs of every layer are freed by now
    for i in sorted(unit_perms):
        if unit_perms[i] is not None:
            t.elements[group_name(mlp.order, i)] = unit_perms[i]
        if i in scales:
            t.elements[group_name(mlp.scale, i)] = scales[i]
    t.elements.update(head_maps_found)
    if permutations:  # the adapter's own groups (an MLM head's hidden units, a pooler), from their declared rows
        t.elements.update(match_declared(view_a, view_b, arch, stream))
    return t


def _match_heads(view_a, rotated_b, arch, heads, i: int, elements: dict, pending: dict, *, head_maps: bool,
                 head_similarity: str, centred_keys: bool, permutations: bool) -> None:
    """Block i's head order (into `elements`) and the problems of its per-head maps (into `pending`, by role)."""
    groups = arch.groups
    fa, fb = head_factors(view_a, heads, i), head_factors(rotated_b, heads, i)
    # the head comparison each declared kind of per-head maps leaves unchanged ("circuit": whole circuits)
    score_kind, value_kind = (groups[r].group() if r is not None and head_similarity == "auto" else None
                              for r in (heads.score_maps, heads.value_maps))
    sa, sb = ((centred_scores(fa, arch.centred_stream), centred_scores(fb, arch.centred_stream))
              if centred_keys else (fa, fb))
    if permutations and heads.within is None and heads.size == arch.n_head:
        perm = match_heads(sa, sb, score_kind, value_kind)
        elements[group_name(heads.order, i)] = perm
        fb = tuple(f[perm.src] for f in fb)
    elif permutations:
        order, within = match_grouped_heads(sa, sb, arch.n_head // heads.size, score_kind, value_kind)
        elements[group_name(heads.order, i)] = order
        if heads.within is not None:
            elements[group_name(heads.within, i)] = within
        total = order._shared(arch.n_head)[0][within.src]
        qb, kb, vb, ob = fb
        fb = (qb[total], kb[order.src], vb[order.src], ob[total])
    if not head_maps:
        return
    for role in heads.maps:
        x, y = heads.map_sides(role)
        xa, xb, ya, yb = fa[x], fb[x], fa[y], fb[y]
        b = groups[role].batch or arch.n_head
        # a map shared by r query heads fits all of them at once: their factors side by side
        xa, xb, ya, yb = (_grouped(f, b) if f.shape[0] != b else f for f in (xa, xb, ya, yb))
        pending.setdefault(role, []).append((i, groups[role].group().head_problem(xa, xb, ya, yb)))


# the first maps weight matching can start from (`restarts`: the default one, the other weighting's, B's stream as it
# is); it alternates from each and keeps the lowest weight distance
RESTARTS = 3
# align's default restarts: 2 for models up to this many parameters, 1 above (decision D2): twice the time, which
# costs seconds below this size and would take GPT-2-124M's weight matching from ~60 s to ~100 s
AUTO_RESTARTS_UP_TO = 1 << 25


def default_restarts(view) -> int:
    """align's restarts when none is given: 2 up to AUTO_RESTARTS_UP_TO parameters (counted on the view), else 1."""
    return 2 if sum(t.numel() for t in view.values()) <= AUTO_RESTARTS_UP_TO else 1


def weight_matching(view_a, view_b, arch, iterations: int = 15, residual: str | None = None,
                    head_maps: bool = True, progress: bool = True, log=None, balanced: bool = True,
                    head_similarity: str = "auto", tol: float = 1e-6, centred_keys: bool = False,
                    unit_similarity: str = "inner", rows: dict | None = None, weighting: str | None = None,
                    restarts: int = 1, first_maps: list | None = None, permutations: bool = True,
                    every_start: bool = False):
    """(Transform π with π(B) ≈ A, per-iteration log). `residual`: the declared residual kind (None) or one of
    its subgroups ("permutation"). `balanced=False`: the unweighted residual fit started from the embeddings
    and the head, the variant learned matching starts from (see glmc/matching/learned.py). Stops when an iteration
    lowers the distance by less than `tol` (relative), or after `iterations`. `centred_keys`, `unit_similarity`:
    match_inner's; `rows`: the rows of residual tensors the residual fits use (cross_correlation); `weighting`:
    the residual fit's tensor weights (WEIGHTINGS; default "norms", or "none" when not `balanced`); `restarts`
    (1–RESTARTS): also alternate from the other weighting's first map and from B's stream as it is, keeping the
    lowest weight distance; `first_maps`: residual elements to alternate from instead (e.g. activation matching's,
    benchmarks/activation_starts.py); `permutations=False`: B's heads and units stay where they are (match_inner);
    `every_start`: return every start's result, a list in start order, instead of the closest (glmc/matching/select.py
    chooses among them by loss)."""
    if not 1 <= restarts <= RESTARTS:
        raise BadOption(f"weight matching restarts from 1 to {RESTARTS} first maps, got {restarts}")
    if iterations < 1:
        raise BadOption(f"weight matching needs at least 1 iteration, got {iterations}")
    if head_similarity not in HEAD_SIMILARITIES:
        raise BadOption(f"unknown head similarity {head_similarity!r}; choose from {', '.join(HEAD_SIMILARITIES)}")
    if unit_similarity not in UNIT_SIMILARITIES:
        raise BadOption(f"unknown unit similarity {unit_similarity!r}; choose from {', '.join(UNIT_SIMILARITIES)}")
    weighting = weighting or ("norms" if balanced else "none")
    if weighting not in WEIGHTINGS:
        raise BadOption(f"unknown residual weighting {weighting!r}; choose from {', '.join(WEIGHTINGS)}")
    residual = residual_kind(arch, residual)
    log = [] if log is None else log
    keys_all = residual_keys(view_a, arch.n_layer, arch)
    t0 = time.perf_counter()
    # the first map's products are the first ResidualPass's for these tensors (no inner element moves them)
    known = {k: ResidualPass._terms(view_a[k], view_b[k], True, weighting, (rows or {}).get(k))
             for k in first_map_keys(view_a, keys_all, weighting)}
    firsts = (list(first_maps) if first_maps is not None
              else _restart_maps(view_a, view_b, keys_all, known, residual, weighting, rows, restarts))
    start_dist = view_distance(view_a, view_b)
    # the embeddings and the head are not read again until the end: off to disk meanwhile (0.6 GB at GPT-2-124M)
    for view in (view_a, view_b):
        park(view, [k for k in view if not k.startswith("blocks.")])
    log.append({"step": "start", "distance": start_dist})
    unmoved: dict = {}  # ResidualPass's terms of the tensors only the residual map moves, reused every iteration

    def alternate(res):
        """The alternation from the first residual map `res`: (best transform, its distance, per-iteration log)."""
        found, found_dist, steps = None, start_dist, []
        bar = tqdm(range(iterations), desc="weight matching", disable=not progress, leave=False)
        for it in bar:
            t1 = time.perf_counter()
            inner = match_inner(view_a, view_b, arch, head_maps, head_similarity, residual=res,
                                centred_keys=centred_keys, unit_similarity=unit_similarity,
                                permutations=permutations)
            t2 = time.perf_counter()
            fitted = ResidualPass(view_a, view_b, inner.elements, arch, keys_all, weighting, rows, unmoved, known)
            res = solve_residual(fitted.fit, residual)
            t3 = time.perf_counter()
            full = Transform({STREAM: res, **inner.elements})
            dist = fitted.distance(res)
            if dist is None:
                dist = streamed_distance(view_a, view_b, full.elements, arch)
            steps.append({"step": it + 1, "distance": dist, "inner_seconds": t2 - t1, "residual_seconds": t3 - t2})
            bar.set_postfix(distance=f"{dist:.4f}")
            if found is not None and dist >= found_dist - tol * found_dist:
                if dist < found_dist:
                    found, found_dist = full, dist
                break
            found, found_dist = full, dist
        return found, found_dist, steps

    best, best_dist, every = None, start_dist, []
    for r, first in enumerate(firsts):
        found, dist, steps = alternate(first)
        log.extend({**s, "restart": r} if len(firsts) > 1 else s for s in steps)
        every.append(found)
        if best is None or dist < best_dist:
            best, best_dist = found, dist
    log.append({"step": "done", "seconds": time.perf_counter() - t0, "distance": best_dist})
    return (every if every_start else best), log


def _restart_maps(view_a, view_b, keys_all, known: dict, residual: str, weighting: str, rows, restarts: int) -> list:
    """The first residual maps of `restarts` alternations: `weighting`'s fit (its products `known`), the other
    weighting's, then B's stream as it is."""
    firsts = [solve_residual(sum(t[3] for t in known.values()), residual)]
    if restarts > 1:
        other = "none" if weighting != "none" else "norms"
        firsts.append(solve_residual(sum(cross_correlation(view_a[k], view_b[k], other, (rows or {}).get(k))
                                         for k in first_map_keys(view_a, keys_all, other)), residual))
    if restarts > 2:
        firsts.append(solve_residual(torch.eye(view_a[keys_all[0]].shape[-1], dtype=torch.float64), residual))
    return firsts


def first_map_keys(view, keys_all, weighting: str) -> list:
    """The residual tensors the first residual map is fitted on for `weighting` (start_keys; the unweighted fit
    also uses the head)."""
    return [k for k in keys_all if k in (start_keys(view) if weighting != "none" else RAW_INIT_KEYS)]


# The weight method's stopping tolerance (decision D11): past this relative gain per iteration the distance still
# creeps down but the barrier does not follow
TOL = WeightOptions.tol


