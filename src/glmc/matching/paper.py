"""The paper's weight matching (arXiv 2506.22712's code, as ../shared/design/maths.md describes it): what
`--algorithm paper` runs, in circuit mode to reproduce the paper's algorithm; circuit mode's default without data;
and one of the candidates weight matching chooses among with data (glmc/matching/select.py).

Per iteration (`iterations`, 15 in the paper; no early stop), in this order:
  1. residual O: orthogonal Procrustes on stacked blocks, each block's rows divided by √(its row count) (its
     cross-correlation by the row count). Iteration 0 uses only the input and output tables: the embedding rows of
     tokens seen in training (all rows without token data), every position row, the LM-head / classifier rows
     (a ViT's patch-embedding rows stand for the token embedding). Later iterations add every layer's circuit-form
     attention input (the stored query matrix QK_hᵀ·√((d+1)/d_head), whose input side O acts on), its output
     matrix OV_h (output side) and the MLP's input and output rows, all with the current head and unit
     permutations applied and the circuits' other side at the current O.
  2. heads, per layer: linear assignment on ‖QK_A,i − QK_B,j‖ + ‖OV_A,i − OV_B,j‖, un-squared Frobenius distances
     of the bias-augmented circuits (x̂ = [x, 1]; glmc/view/circuit.py), B at the current O.
  3. MLP units, per layer: linear assignment on the L1 distance between unit signatures [w_in row; b_in; w_out
     row], each normalised to unit L2 length, B at the current O.
Deliberate differences, each so that the result stays an exact native transform: O fixes the all-ones direction
where the model declares that restriction (LayerNorm models; the paper's RMS form admits any O, but its writers
are centred, so their fit loses nothing), and bias vectors (one row each) are left out of the fit. Per-head maps
do not exist here: circuits absorb them.
"""

from __future__ import annotations

import time

import torch
from tqdm.auto import tqdm

from glmc.errors import BadOption
from glmc.matching.alternation import match_inner
from glmc.matching.assignments import assignment
from glmc.matching.common import layer_chunks, residual_keys, view_distance
from glmc.matching.declared import match_declared
from glmc.matching.heads import head_factors
from glmc.matching.mlp_units import signature_similarity
from glmc.matching.residual_fit import cross_correlation, moved_part, residual_kind, solve_residual, streamed_distance
from glmc.symmetry.solvers import circuit_similarity
from glmc.symmetry.spec import group_name
from glmc.symmetry.structure import STREAM, structure
from glmc.symmetry.transform import Transform, apply_elements

# the tables iteration 0 fits O on: token / patch embeddings, positions, the LM head or classifier
TABLE_KEYS = ("embed", "pos_embed", "patch.w", "head.w")


def circuit_norms(x, y) -> torch.Tensor:
    """‖X_hᵀ·Y_h‖² per head, from d_head×d_head Gram blocks."""
    return (torch.einsum("hpd,hqd->hpq", x, x) * torch.einsum("hpd,hqd->hpq", y, y)).sum((-1, -2))


def circuit_distances(fa, fb) -> torch.Tensor:
    """cost[i, j] = ‖QK_A,i − QK_B,j‖ + ‖OV_A,i − OV_B,j‖ (un-squared) for bias-augmented head factors."""
    cost = 0
    for xa, ya, xb, yb in ((fa[0], fa[1], fb[0], fb[1]), (fa[2], fa[3], fb[2], fb[3])):
        sq = circuit_norms(xa, ya)[:, None] + circuit_norms(xb, yb)[None] - 2 * circuit_similarity(xa, ya, xb, yb)
        cost = cost + sq.clamp_min(0).sqrt()
    return cost


def match_circuits(view_a, view_b, arch, res) -> dict:
    """Head and unit permutations of every layer, B moved by the residual element `res` (steps 2 and 3)."""
    elements = {}
    found = structure(arch.groups)
    heads, units = found.heads, found.units
    chunks = layer_chunks(view_b, arch.n_layer)
    for i in range(arch.n_layer):
        b = moved_part(view_b, chunks[i], {STREAM: res}, arch)
        elements[group_name(heads.order, i)] = assignment(-circuit_distances(head_factors(view_a, heads, i),
                                                                             head_factors(b, heads, i)))
        if units is not None:
            elements[group_name(units.order, i)] = assignment(signature_similarity(view_a, b, units, i, "l1"))
    return elements


def table_cross(view_a, view_b, keys, rows: dict) -> torch.Tensor:
    """Σ over the tables of B_tᵀ·A_t / rows_t (step 1's blocks that no permutation moves)."""
    return sum(cross_correlation(view_a[k], view_b[k], "rows", rows.get(k)) for k in keys)


def block_cross(view_a, view_b, arch, res, inner: dict) -> torch.Tensor:
    """Σ over every layer's circuit-form blocks of B′ᵀ·A / rows, B′ under the permutations `inner`, with the side
    of each circuit that O does not act on in this term moved by the current residual element `res`."""
    found = structure(arch.groups)
    heads, units = found.heads, found.units
    d = view_a[heads.factors(0)[3] + ".w"].shape[-1]
    c2 = (d + 1) / arch.d_head  # the stored query is QK_hᵀ·√((d+1)/d_head): its cross scales by the square
    total = torch.zeros(d, d, dtype=torch.float64)
    chunks = layer_chunks(view_b, arch.n_layer)
    for i in range(arch.n_layer):
        permuted = moved_part(view_b, chunks[i], inner, arch)
        full = moved_part(view_b, chunks[i], {STREAM: res, **inner}, arch)
        qa, ka, va, oa = head_factors(view_a, heads, i)
        qp, _, _, op = head_factors(permuted, heads, i)
        _, kf, vf, _ = head_factors(full, heads, i)
        # attention input: rows of QK_hᵀ (one per key coordinate) over the query side; its bias coordinate is fixed
        total += c2 * cross_correlation(torch.einsum("hpd,hpe->hed", qa, ka)[..., :-1],
                                        torch.einsum("hpd,hpe->hed", qp, kf)[..., :-1], "rows")
        # output: rows of OV_h (one per value coordinate) over the output side (head_factors pads o with a zero
        # column, dropped here)
        total += cross_correlation(torch.einsum("hpd,hpe->hde", va, oa)[..., :-1],
                                   torch.einsum("hpd,hpe->hde", vf, op)[..., :-1], "rows")
        for k in () if units is None else (p + ".w" for p in units.prefixes(i)[:2]):
            if k in view_a:
                total += cross_correlation(view_a[k], permuted[k], "rows")
    return total


def runs_on(arch) -> bool:
    """Whether the paper's alternation applies: it assigns whole heads, so it needs plain multi-head attention (a
    head order of every head, one by one; grouped-query models order key/value groups)."""
    heads = structure(arch.groups).heads
    return heads is not None and heads.within is None and heads.size == arch.n_head


def paper_weight_matching(view_a, view_b, arch, iterations: int = 15, residual: str | None = None,
                          rows: dict | None = None, progress: bool = True, log=None):
    """(Transform π with π(B) ≈ A in circuit form, per-iteration log): the module docstring's alternation.
    `rows`: the embedding rows of seen tokens (weight.seen_token_rows); `residual`: as weight_matching's."""
    if not runs_on(arch):
        raise BadOption(f"the paper's circuit-form matching needs plain multi-head attention; this {arch.family} "
                        "model declares no head permutation group (use --mode native)")
    if iterations < 1:
        raise BadOption(f"weight matching needs at least 1 iteration, got {iterations}")
    kind_name = residual_kind(arch, residual)
    rows = rows or {}
    log = [] if log is None else log
    t0 = time.perf_counter()
    tables = [k for k in residual_keys(view_a, arch.n_layer) if k in TABLE_KEYS]
    fixed = table_cross(view_a, view_b, tables, rows)
    log.append({"step": "start", "distance": view_distance(view_a, view_b)})
    res, inner = solve_residual(fixed, kind_name), {}
    for it in tqdm(range(iterations), desc="weight matching (paper)", disable=not progress, leave=False):
        t1 = time.perf_counter()
        if it:
            res = solve_residual(fixed + block_cross(view_a, view_b, arch, res, inner), kind_name)
        t2 = time.perf_counter()
        inner = match_circuits(view_a, view_b, arch, res)
        t3 = time.perf_counter()
        dist = streamed_distance(view_a, view_b, {STREAM: res, **inner}, arch)
        log.append({"step": it + 1, "distance": dist, "residual_seconds": t2 - t1, "inner_seconds": t3 - t2})
    t = Transform({STREAM: res, **inner})
    log.append({"step": "done", "seconds": time.perf_counter() - t0, "distance": log[-1]["distance"]})
    return t, log


def fits_head_maps(head_maps: bool, mode: str, arch) -> bool:
    """Whether per-head maps are fitted after an alternation: asked for, native mode (circuits absorb them), and
    declared by the model."""
    heads = structure(arch.groups).heads
    return head_maps and mode == "native" and heads is not None and bool(heads.maps)


def paper_transform(view_a, view_b, arch, iterations, residual, rows, progress, head_maps: bool):
    """(π, log): the paper's alternation (above), then, with `head_maps`, the per-head maps that
    bring B's factors onto A's given its residual map and permutations."""
    t, log = paper_weight_matching(view_a, view_b, arch, iterations, residual, rows, progress)
    # the adapter's own groups (an MLM head's units, a pooler), which the paper's alternation does not know
    t.elements.update(match_declared(view_a, view_b, arch, {STREAM: t.elements[STREAM]}
                                     if STREAM in t.elements else {}))
    if head_maps:  # B moved once (a model-sized copy), then one pass fitting the maps alone
        maps = match_inner(view_a, apply_elements(view_b, t.elements, arch), arch, permutations=False)
        t = t.then(maps, arch)
        log.append({"step": "head maps", "distance": streamed_distance(view_a, view_b, t.elements, arch)})
    return t, log
