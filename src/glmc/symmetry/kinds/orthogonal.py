"""Orthogonal maps (of the residual stream behind a gain-free RMS norm, or of a head's dimensions), those that
fix the all-ones direction (behind a LayerNorm on a mean-centred stream), and signed permutations (those that
commute with a norm's elementwise gain)."""

from __future__ import annotations

import math

import torch

from glmc.symmetry.elements import LinearMap, PermutationDenseMap
from glmc.symmetry.kinds.base import (
    Kind,
    assignment_src,
    dense,
    ones_complement_basis,
    random_orthogonal,
    register_kind,
)
from glmc.symmetry.projections import polar


@register_kind
class Orthogonal(Kind):
    name = "orthogonal"
    contains = ("orthogonal-fixing-ones", "signed-permutation", "sign-permutation", "permutation")

    def random(self, n, batch, gen):
        return LinearMap(random_orthogonal(n, gen, () if batch is None else (batch,)))

    def identity(self, n, batch=None):
        eye = torch.eye(n, dtype=torch.float64)
        return LinearMap(eye if batch is None else eye.expand(batch, n, n).clone())

    def nearest(self, m):
        p, _, qt = torch.linalg.svd(m.double())
        return LinearMap(p @ qt)

    def fit_head_maps(self, xa, xb, ya, yb):
        # C^-T = C: one Procrustes problem on [X Y]
        return self.nearest(xa @ xb.transpose(-1, -2) + ya @ yb.transpose(-1, -2)).matrix

    def latent(self, e, batch=None):
        return dense(e).float().clone()

    def project(self, z, hard=False, soft=False):
        return polar(z)

    def element(self, dense):
        return LinearMap(dense.detach().cpu().double())

    def embed(self, n, m, gen=None):
        """O ∈ R^{N×M} with orthonormal rows ([I 0], or random rows with `gen`)."""
        if gen is None:
            return torch.eye(n, m, dtype=torch.float64)
        return random_orthogonal(m, gen)[:n]


@register_kind
class OrthogonalFixingOnes(Orthogonal):
    """O·1 = 1: the residual maps that commute with LayerNorm on a mean-centred stream,
    O = 11ᵀ/d + U·R·Uᵀ with U a basis of 1^⊥ and R ∈ O(d−1)."""

    name = "orthogonal-fixing-ones"
    contains = ("permutation",)
    _bases: dict = {}

    def basis(self, d, like=None):
        key = (d, None if like is None else (like.dtype, like.device))
        if key not in self._bases:
            u = ones_complement_basis(d)
            self._bases[key] = u if like is None else u.to(like)
        return self._bases[key]

    def _compose(self, r):
        d = r.shape[-1] + 1
        u = self.basis(d, r if r.dtype != torch.float64 else None)
        return torch.full((d, d), 1.0 / d, dtype=r.dtype, device=r.device) + u @ r @ u.T

    def random(self, n, batch, gen):
        return LinearMap(self._compose(random_orthogonal(n - 1, gen)))

    def nearest(self, m):
        u = self.basis(m.shape[0])
        p, _, qt = torch.linalg.svd(u.T @ m.double() @ u)
        return LinearMap(self._compose(p @ qt))

    fit_head_maps = Kind.fit_head_maps

    def latent(self, e, batch=None):
        u = self.basis(e.n)
        return (u.T @ dense(e).double() @ u).float()

    def project(self, z, hard=False, soft=False):
        return self._compose(polar(z))

    def embed(self, n, m, gen=None):
        """O = 1_N·1_Mᵀ/√(NM) + U_N·R·U_Mᵀ (R: (N−1)×(M−1) with orthonormal rows): O·Oᵀ = I and O maps mean-zero
        streams to mean-zero streams."""
        r = torch.eye(n - 1, m - 1, dtype=torch.float64) if gen is None else random_orthogonal(m - 1, gen)[: n - 1]
        return (torch.ones(n, m, dtype=torch.float64) / math.sqrt(n * m)
                + ones_complement_basis(n) @ r @ ones_complement_basis(m).T)


@register_kind
class SignedPermutation(Orthogonal):
    """Permutations with signs: the residual maps that commute with a norm's elementwise gain."""

    name = "signed-permutation"
    contains = ("sign-permutation", "permutation")
    discrete = True

    def random(self, n, batch, gen):
        signs = torch.randint(0, 2, (n,), generator=gen).double() * 2 - 1
        m = torch.zeros(n, n, dtype=torch.float64)
        m[torch.randperm(n, generator=gen), torch.arange(n)] = signs
        return LinearMap(m)

    def _hard(self, z):
        m = torch.zeros_like(z)
        src = assignment_src(z.abs()).to(z.device)
        cols = torch.arange(z.shape[1], device=z.device)
        m[src, cols] = torch.sign(z[src, cols]).detach()
        return m

    def nearest(self, m):
        return LinearMap(self._hard(m.double()))

    fit_head_maps = Kind.fit_head_maps

    def project(self, z, hard=False, soft=False):
        h = self._hard(z)
        return h if hard else h + z - z.detach()

    def differentiable(self, z, hard=False, soft=False):
        return PermutationDenseMap(self.project(z, hard=hard, soft=soft))
