"""Invertible maps (inside a head's linear compositions: its QK and OV circuits) and per-unit non-zero scales
(SwiGLU's up/down)."""

from __future__ import annotations

import torch

from glmc.symmetry.elements import DiagonalDenseMap, LinearMap, ScaleMap
from glmc.symmetry.kinds.base import Kind, dense, log_uniform_scales, random_orthogonal, register_kind
from glmc.symmetry.kinds.orthogonal import Orthogonal
from glmc.symmetry.solvers import FactorGrams, fit_factor_grams, fit_factor_map


@register_kind
class Invertible(Kind):
    name = "invertible"
    orthogonal = False
    contains = ("orthogonal", "orthogonal-fixing-ones", "signed-permutation", "sign-permutation", "permutation",
                "scale-rotation", "partial-rotary", "diagonal")

    def random(self, n, batch, gen, cond: float = 4.0):
        """Well-conditioned: orthogonal · diag(singular values in [1/√cond, √cond]) · orthogonal."""
        shape = () if batch is None else (batch,)
        u, v = random_orthogonal(n, gen, shape), random_orthogonal(n, gen, shape)
        s = log_uniform_scales((*shape, n), gen, cond)
        return LinearMap(u @ torch.diag_embed(s) @ v)

    identity = Orthogonal.identity

    def fit_head_maps(self, xa, xb, ya, yb):
        return fit_factor_map(xa, xb, ya, yb)

    def head_problem(self, xa, xb, ya, yb):
        """The k×k Gram blocks of the fit; every layer's are solved in one batched L-BFGS run."""
        return FactorGrams(xa, xb, ya, yb)

    def solve_head_problems(self, problems):
        if not problems:
            return []
        maps = fit_factor_grams(FactorGrams.cat(problems))
        return list(maps.split([g.nx.shape[0] for g in problems]))

    def latent(self, e, batch=None):
        return dense(e).float().clone()

    def project(self, z, hard=False, soft=False):
        return z

    def element(self, dense):
        return LinearMap(dense.detach().cpu())


@register_kind
class Diagonal(Kind):
    """Non-zero scales per unit: x·diag(s) on one side, x·diag(1/s) on the other (SwiGLU's up/down)."""

    name = "diagonal"
    orthogonal = False

    def random(self, n, batch, gen):
        mag = log_uniform_scales(n, gen)
        signs = torch.randint(0, 2, (n,), generator=gen).double() * 2 - 1
        return ScaleMap(mag * signs)

    def identity(self, n, batch=None):
        return ScaleMap(torch.ones(n, dtype=torch.float64))

    def latent(self, e, batch=None):
        return e.scale.float().clone()

    def project(self, z, hard=False, soft=False):
        return torch.diag_embed(z)

    def differentiable(self, z, hard=False, soft=False):
        return DiagonalDenseMap(z)

    def element(self, dense):
        return ScaleMap(torch.diagonal(dense.detach().cpu().double(), dim1=-2, dim2=-1))
