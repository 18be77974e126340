"""MLP units under weight matching: the similarities units are permuted on (inner products of their rows, or
normalised signatures by cosine or L1 distance), a gated MLP's scale-blind similarity and the closed-form fit of
its per-unit scale (a declared unit scale). Which tensors are the up, down and gate projections is read off the
declarations (`units`: glmc/symmetry/structure.py Units); `i` is the block."""

from __future__ import annotations

import torch

from glmc.matching.common import SCORING_BFLOAT16_FROM, ranking_product, ranks_in_bfloat16
from glmc.symmetry.elements import ScaleMap
from glmc.symmetry.solvers import best_complex_scale
from glmc.symmetry.structure import Units


def _unit_rows(view, p: str) -> torch.Tensor:
    """The units' rows of the projection with prefix `p`, with its bias as one more column where it has one."""
    w = view[p + ".w"]
    return w if p + ".b" not in view else torch.cat([w, view[p + ".b"][:, None]], -1)


def gated(view, units: Units, i) -> bool:
    """Whether block i's units have a gate and a declared per-unit scale (the scale-blind similarity applies)."""
    gate = units.prefixes(i)[2]
    return units.scale is not None and gate is not None and gate + ".w" in view


def gated_mlp_similarity(view_a, view_b, units: Units, i) -> torch.Tensor:
    """Units of a gated MLP whose up/down rows may be rescaled per unit (a unit scale): the gate rows (and bias) by
    inner product, up (with its bias) and down by |cosine|, which no per-unit scale (or sign) changes."""
    up, down, gate = units.prefixes(i)

    def cos(a, b):
        a, b = a.float(), b.float()
        a, b = a / a.norm(dim=-1, keepdim=True).clamp_min(1e-30), b / b.norm(dim=-1, keepdim=True).clamp_min(1e-30)
        return ranking_product(a, b).abs_()

    gate_a, gate_b = _unit_rows(view_a, gate).float(), _unit_rows(view_b, gate).float()
    s = ranking_product(gate_a, gate_b).div_((gate_a.norm() * gate_b.norm() / gate_a.shape[0]).clamp_min(1e-30))
    s += cos(_unit_rows(view_a, up), _unit_rows(view_b, up))
    s += cos(view_a[down + ".w"], view_b[down + ".w"])
    return s


def fit_mlp_scale(view_a, view_b, units: Units, i) -> ScaleMap:
    """Per-unit s with s·up_B ≈ up_A (bias included) and down_B/s ≈ down_A, in closed form (best_complex_scale,
    real)."""
    up, down, _ = units.prefixes(i)
    ua, ub = (_unit_rows(view, up) for view in (view_a, view_b))
    da, db = (view[down + ".w"] for view in (view_a, view_b))
    s = best_complex_scale(ub, ua, db, da, ua.pow(2).sum(dtype=torch.float64).clamp_min(1e-30),
                           da.pow(2).sum(dtype=torch.float64).clamp_min(1e-30))
    return ScaleMap(s.float())


UNIT_SIMILARITIES = ("inner", "cosine", "l1")


def unit_signatures(view, units: Units, i) -> torch.Tensor:
    """[n, 2d+1]: each MLP unit's input row, input bias and output row, normalised to unit length."""
    up, down, _ = units.prefixes(i)
    parts = [view[up + ".w"].float()]
    if up + ".b" in view:
        parts.append(view[up + ".b"].float()[:, None])
    parts.append(view[down + ".w"].float())
    sig = torch.cat(parts, -1)
    return sig / sig.norm(dim=-1, keepdim=True).clamp_min(1e-30)


def signature_similarity(view_a, view_b, units: Units, i, kind_name: str) -> torch.Tensor:
    """MLP units compared on normalised signatures: by cosine, or by minus their L1 distance (the paper's code)."""
    sa, sb = unit_signatures(view_a, units, i), unit_signatures(view_b, units, i)
    return sa @ sb.T if kind_name == "cosine" else -torch.cdist(sa, sb, p=1)


def ranked_in_bfloat16(view_a, view_b, units: Units, i, kind_name: str = "inner") -> tuple:
    """The tensors of layer i's MLP that its unit similarity reads only through bfloat16 products (ranking_product),
    so a caller may move them in bfloat16 first: a plain MLP's rows at real sizes, and a gated MLP's gate rows (its
    up and down rows also feed the per-unit scale fit); none for the signature similarities, or where bfloat16
    products are not native. At GPT-2-124M this made the residual rotation's MLP share 4× cheaper (decision D16)."""
    up, down, gate = units.prefixes(i)
    has_gate = gate is not None and gate + ".w" in view_a
    rows = (gate if has_gate else up) + ".w"
    if (kind_name != "inner" and not has_gate) or rows not in view_a:
        return ()
    if not ranks_in_bfloat16(view_a[rows], view_b[rows]):
        return ()
    return (rows,) if has_gate else (rows, down + ".w")


def mlp_similarity(view_a, view_b, units: Units, i, kind_name: str = "inner") -> torch.Tensor:
    if kind_name != "inner":
        return signature_similarity(view_a, view_b, units, i, kind_name)
    up, down, _ = units.prefixes(i)
    # float32 products (bfloat16 ones at real sizes: ranking_product): an assignment needs the ranking of
    # similarities, not their last digits; the second accumulates in place (an n×n temporary fewer)
    a_in, b_in, a_out, b_out = (v[k].float() for k in (up + ".w", down + ".w") for v in (view_a, view_b))
    if a_in.shape[0] * b_in.shape[0] * a_in.shape[1] >= SCORING_BFLOAT16_FROM:
        s = ranking_product(torch.cat([a_in, a_out], -1), torch.cat([b_in, b_out], -1))
    else:
        s = a_in @ b_in.T
        s.addmm_(a_out, b_out.T)
    if up + ".b" in view_a:
        s.addr_(view_a[up + ".b"].float(), view_b[up + ".b"].float())
    return s


