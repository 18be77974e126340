"""MLP units under weight matching: the similarities units are permuted on (inner products of their rows, or
normalised signatures by cosine or L1 distance), a gated MLP's scale-blind similarity and the closed-form fit of
its per-unit scale (a declared `mlp_scale`)."""

from __future__ import annotations

import torch

from glmc.matching.assignments import assignment
from glmc.matching.common import SCORING_BFLOAT16_FROM, ranking_product, ranks_in_bfloat16
from glmc.symmetry.elements import IndexMap, ScaleMap
from glmc.symmetry.solvers import best_complex_scale


def match_gated_mlp(view_a, view_b, i) -> IndexMap:
    return assignment(gated_mlp_similarity(view_a, view_b, i))


def _unit_rows(view, p: str, k: str) -> torch.Tensor:
    """A unit's rows of the gated MLP's `k` ("gate", "in"), with its bias as one more column where it has one."""
    w = view[p + k + ".w"]
    return w if p + k + ".b" not in view else torch.cat([w, view[p + k + ".b"][:, None]], -1)


def gated_mlp_similarity(view_a, view_b, i) -> torch.Tensor:
    """Units of a gated MLP whose up/down rows may be rescaled per unit (mlp_scale): the gate rows (and bias) by
    inner product, up (with its bias) and down by |cosine|, which no per-unit scale (or sign) changes."""
    p = f"blocks.{i}.mlp."

    def cos(a, b):
        a, b = a.float(), b.float()
        a, b = a / a.norm(dim=-1, keepdim=True).clamp_min(1e-30), b / b.norm(dim=-1, keepdim=True).clamp_min(1e-30)
        return ranking_product(a, b).abs_()

    gate_a, gate_b = _unit_rows(view_a, p, "gate").float(), _unit_rows(view_b, p, "gate").float()
    s = ranking_product(gate_a, gate_b).div_((gate_a.norm() * gate_b.norm() / gate_a.shape[0]).clamp_min(1e-30))
    s += cos(_unit_rows(view_a, p, "in"), _unit_rows(view_b, p, "in"))
    s += cos(view_a[p + "out.w"], view_b[p + "out.w"])
    return s


def fit_mlp_scale(view_a, view_b, i) -> ScaleMap:
    """Per-unit s with s·up_B ≈ up_A (bias included) and down_B/s ≈ down_A, in closed form (best_complex_scale,
    real)."""
    p = f"blocks.{i}.mlp."
    ua, ub = (_unit_rows(view, p, "in") for view in (view_a, view_b))
    da, db = (view[p + "out.w"] for view in (view_a, view_b))
    s = best_complex_scale(ub, ua, db, da, ua.pow(2).sum(dtype=torch.float64).clamp_min(1e-30),
                           da.pow(2).sum(dtype=torch.float64).clamp_min(1e-30))
    return ScaleMap(s.float())


def match_mlp(view_a, view_b, i) -> IndexMap:
    return assignment(mlp_similarity(view_a, view_b, i))


UNIT_SIMILARITIES = ("inner", "cosine", "l1")


def unit_signatures(view, i) -> torch.Tensor:
    """[n, 2d+1]: each MLP unit's input row, input bias and output row, normalised to unit length."""
    p = f"blocks.{i}.mlp."
    parts = [view[p + "in.w"].float()]
    if p + "in.b" in view:
        parts.append(view[p + "in.b"].float()[:, None])
    parts.append(view[p + "out.w"].float())
    sig = torch.cat(parts, -1)
    return sig / sig.norm(dim=-1, keepdim=True).clamp_min(1e-30)


def signature_similarity(view_a, view_b, i, kind_name: str) -> torch.Tensor:
    """MLP units compared on normalised signatures: by cosine, or by minus their L1 distance (the paper's code)."""
    sa, sb = unit_signatures(view_a, i), unit_signatures(view_b, i)
    return sa @ sb.T if kind_name == "cosine" else -torch.cdist(sa, sb, p=1)


def ranked_in_bfloat16(view_a, view_b, i, kind_name: str = "inner") -> tuple:
    """The tensors of layer i's MLP that its unit similarity reads only through bfloat16 products (ranking_product),
    so a caller may move them in bfloat16 first: a plain MLP's rows at real sizes, and a gated MLP's gate rows (its
    up and down rows also feed the per-unit scale fit); none for the signature similarities, or where bfloat16
    products are not native. At GPT-2-124M this made the residual rotation's MLP share 4× cheaper (decision D16)."""
    p = f"blocks.{i}.mlp."
    gated = p + "gate.w" in view_a
    rows = p + ("gate.w" if gated else "in.w")
    if (kind_name != "inner" and not gated) or rows not in view_a:
        return ()
    if not ranks_in_bfloat16(view_a[rows], view_b[rows]):
        return ()
    return (rows,) if gated else (rows, p + "out.w")


def mlp_similarity(view_a, view_b, i, kind_name: str = "inner") -> torch.Tensor:
    if kind_name != "inner":
        return signature_similarity(view_a, view_b, i, kind_name)
    p = f"blocks.{i}.mlp."
    # float32 products (bfloat16 ones at real sizes: ranking_product): an assignment needs the ranking of
    # similarities, not their last digits; the second accumulates in place (an n×n temporary fewer)
    a_in, b_in, a_out, b_out = (v[p + k].float() for k in ("in.w", "out.w") for v in (view_a, view_b))
    if a_in.shape[0] * b_in.shape[0] * a_in.shape[1] >= SCORING_BFLOAT16_FROM:
        s = ranking_product(torch.cat([a_in, a_out], -1), torch.cat([b_in, b_out], -1))
    else:
        s = a_in @ b_in.T
        s.addmm_(a_out, b_out.T)
    if p + "in.b" in view_a:
        s.addr_(view_a[p + "in.b"].float(), view_b[p + "in.b"].float())
    return s


