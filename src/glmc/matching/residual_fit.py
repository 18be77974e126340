"""Weight matching's residual step and the distances it is judged by: cross-correlations of the residual tensors,
the nearest residual element of the declared kind (or a declared subgroup) to them, and the weight distance after
a transform, all streamed one block at a time (layer_chunks), never holding a transformed copy of the model.
Used by both alternations (glmc/matching/alternation.py, glmc/matching/paper.py) and by candidate selection."""

from __future__ import annotations

import math

import torch

from glmc.errors import BadOption
from glmc.matching.common import (
    SCORING_FLOAT64_UP_TO,
    layer_chunks,
    residual_actions,
    simple_residual,
    squared_norm,
)
from glmc.memory import release_keys, trim
from glmc.symmetry.elements import bfloat16_moves, float32_moves
from glmc.symmetry.kinds import kind
from glmc.symmetry.structure import STREAM
from glmc.symmetry.transform import apply_elements


def cross_correlation(a, b, weighting: str, mask=None) -> torch.Tensor:
    """w_t·B_tᵀ·A_t (_weight), float64, over the rows in `mask` (all by default). Big tensors multiply in float32
    (SCORING_FLOAT64_UP_TO), 5-10× faster than float64 and accurate to ~1e-6 relative: a Procrustes target needs no
    more."""
    d = a.shape[-1]
    if mask is not None:
        a, b = a[mask], b[mask]
    work = torch.float64 if a.numel() <= SCORING_FLOAT64_UP_TO else torch.float32
    a, b = a.reshape(-1, d).to(work), b.reshape(-1, d).to(work)
    m = (b.T @ a).double()
    norms = weighting == "norms"
    return m * _weight(weighting, squared_norm(a) if norms else 0.0, squared_norm(b) if norms else 0.0, a.shape[0])


WEIGHTINGS = ("norms", "none", "rows")


def _weight(weighting: str, na: float, nb: float, rows: int) -> float:
    """A residual tensor's weight in the Procrustes fit (WEIGHTINGS): "norms" 1/(‖A_t‖·‖B_t‖), so every tensor
    weighs the same whatever its scale; "none" 1 (the plain sum); "rows" 1/rows (the paper's code divides each
    block's rows by √rows)."""
    if weighting == "rows":
        return 1.0 / max(rows, 1)
    return 1.0 / max(math.sqrt(na * nb), 1e-30) if weighting == "norms" else 1.0


def moved_part(view: dict, keys, elements: dict, arch, bfloat16_keys=()) -> dict:
    """π(view) restricted to `keys` (a new dict; the view is not modified); those also in `bfloat16_keys` are moved
    in bfloat16 (for a caller that only ranks them from bfloat16 products). Every streaming pass calls this once
    per block, so it is also where the previous block's freed temporaries go back to the OS (glmc/memory.py)."""
    trim()
    low = [k for k in keys if k in bfloat16_keys]
    with float32_moves(SCORING_FLOAT64_UP_TO):  # the parts are only scored, never written
        out = apply_elements({k: view[k] for k in keys if k not in low}, elements, arch, strict=False)
        if low:
            with bfloat16_moves():
                out.update(apply_elements({k: view[k] for k in low}, elements, arch, strict=False))
    return out


class ResidualPass:
    """One streamed pass over π_inner(B) (layer_chunks) that yields both what the residual fit needs and the weight
    distance after any orthogonal residual map O, so no second pass over the model is made per iteration:
    ‖A_t − B′_t·O‖² = ‖A_t‖² + ‖B′_t‖² − 2⟨B′_tᵀ·A_t, O⟩ for a tensor whose residual axis is last, and the rest
    (head and unit biases) are compared directly."""

    def __init__(self, view_a: dict, view_b: dict, elements: dict, arch, keys, weighting: str,
                 rows: dict | None = None, unmoved: dict | None = None, known: dict | None = None):
        """`unmoved`: a cache the caller keeps across iterations for the summed terms of the tensors no element
        moves (embeddings, LM head, norm biases: the biggest products, and the same every iteration); which tensors
        those are depends only on which groups `elements` names, so the sums are cached under those names.
        `known`: key -> terms (_terms) of tensors of B the caller has measured already (the first map's)."""
        d = view_a[keys[0]].shape[-1]
        wanted, rows = set(keys), rows or {}
        cached = None if unmoved is None else unmoved.get(frozenset(elements))
        # tensors the residual moves other than on the last axis of a fitted tensor (a norm's gain on the stream, a
        # tied MLM head's dense layer on both axes): kept aside, and measured exactly for each residual element
        acts = residual_actions(view_b, arch) if STREAM in arch.groups else {}
        odd = {k for k, a in acts.items() if k not in wanted or not simple_residual(a)}
        self.arch, self.odd, odd_norm = arch, {}, 0.0
        # [Σ ‖A_t‖², Σ ‖A_t‖² + ‖B′_t‖² over residual tensors (+ the rest's distances), Σ B′_tᵀ·A_t, Σ w_t·B′_tᵀ·A_t]
        moved = [0.0, 0.0, torch.zeros(d, d, dtype=torch.float64), torch.zeros(d, d, dtype=torch.float64)]
        fresh = [0.0, 0.0, torch.zeros(d, d, dtype=torch.float64), torch.zeros(d, d, dtype=torch.float64)]
        for chunk in layer_chunks(view_b, arch.n_layer):
            part = moved_part(view_b, chunk, elements, arch)
            for k in chunk:
                if k in odd:
                    self.odd[k] = (view_a[k], part[k])
                    odd_norm += squared_norm(view_a[k])
                    continue
                same = part[k] is view_b[k]
                if same and cached is not None:
                    continue
                terms = (known or {}).get(k) if same else None
                if terms is None:
                    terms = self._terms(view_a[k], part[k], k in wanted, weighting, rows.get(k))
                _add(fresh if same else moved, terms)
            release_keys(chunk, view_a, view_b)
        if cached is None:
            cached = fresh
            if unmoved is not None:
                unmoved[frozenset(elements)] = fresh
        _add(moved, cached)
        self.norm_a, self.fixed, self.raw, self.fit = moved
        self.norm_a += odd_norm

    @staticmethod
    def _terms(a, b, residual: bool, weighting: str, mask=None) -> tuple:
        """(‖A_t‖², its share of `fixed`, B′_tᵀ·A_t, its weighted share of the fit; None for a non-residual one)."""
        na = squared_norm(a)
        if not residual:
            return na, squared_norm(a, b), None, None
        nb = squared_norm(b)
        raw = cross_correlation(a, b, "none")
        fit = cross_correlation(a, b, weighting, mask) if mask is not None else raw * _weight(
            weighting, na, nb, a.reshape(-1, a.shape[-1]).shape[0])
        return na, na + nb, raw, fit

    def distance(self, res) -> float | None:
        """Σ‖A − O·π_inner(B)‖² / Σ‖A‖² for the residual element `res`; None if `res` is not orthogonal (then only
        a pass over the moved model can tell)."""
        d = self.raw.shape[0]
        eye = torch.eye(d, dtype=torch.float64)
        co, contra = res.act(eye, -1, "co"), res.act(eye, -1, "contra")
        if not (torch.allclose(co, contra, atol=1e-9) and torch.allclose(co @ co.T, eye, atol=1e-9)):
            return None
        odd = 0.0
        if self.odd:
            there = apply_elements({k: b for k, (_, b) in self.odd.items()}, {STREAM: res}, self.arch, strict=False)
            odd = sum(squared_norm(a, there[k]) for k, (a, _) in self.odd.items())
        return (max(self.fixed - 2 * float((self.raw * co).sum()), 0.0) + odd) / self.norm_a


def _add(totals: list, terms) -> None:
    """totals += terms, entry by entry (ResidualPass's sums; a None term adds nothing)."""
    for i, x in enumerate(terms):
        if x is not None:
            totals[i] = totals[i] + x


def streamed_distance(view_a: dict, view_b: dict, elements: dict, arch) -> float:
    """view_distance(A, π(B)) computed one chunk at a time."""
    num = den = 0.0
    for keys in layer_chunks(view_b, arch.n_layer):
        part = moved_part(view_b, keys, elements, arch)
        for k in keys:
            num += squared_norm(view_a[k], part[k])
            den += squared_norm(view_a[k])
        release_keys(keys, view_a, view_b)
    return num / den


def seen_token_rows(data, view: dict) -> dict:
    """{"embed": mask of the vocabulary rows whose token occurs in `data`'s training split}: an embedding row of
    a token never seen in training is its initialisation (shrunk by weight decay), noise to a Procrustes fit. The
    LM head's rows all take part (training pushes every one of them). Empty when there is no such data."""
    tokens = getattr(data, "tokens", None)
    if tokens is None or "embed" not in view or "train" not in tokens:
        return {}
    seen = torch.bincount(tokens["train"].reshape(-1), minlength=view["embed"].shape[0]) > 0
    return {"embed": seen[: view["embed"].shape[0]]}


def residual_kind(arch, residual: str | None = None) -> str:
    """The kind weight matching fits for the residual: the declared one, or one of its declared subgroups
    ("orthogonal" names the declared kind, for the CLI's --residual)."""
    spec = arch.groups[STREAM]
    if residual in (None, "orthogonal", spec.kind):
        return spec.kind
    if residual not in spec.subgroups:
        raise BadOption(f"residual {residual!r} is not a subgroup this {arch.family} model declares for its "
                        f"{spec.kind} residual group (choose from {', '.join((spec.kind,) + spec.subgroups)})")
    return residual


def solve_residual(m: torch.Tensor, kind_name: str):
    """The residual element of `kind_name` nearest to the cross-correlation M (maximising ⟨O, M⟩)."""
    return kind(kind_name).nearest(m)

