"""Permutations of units or heads, permutations inside blocks (grouped-query attention's query heads), and the
two non-invertible extensions that still keep a function where declared: unit splitting and zero units."""

from __future__ import annotations

import torch

from glmc.symmetry.elements import DenseMap, IndexMap, PermutationDenseMap
from glmc.symmetry.kinds.base import Kind, assignment_src, register_kind
from glmc.symmetry.projections import hard_permutation, hungarian_ste, sinkhorn, src_of


@register_kind
class Permutation(Kind):
    name = "permutation"
    discrete = True
    contains = ("grouped-permutation",)

    def random(self, n, batch, gen):
        return IndexMap(torch.randperm(n, generator=gen), None, n)

    def identity(self, n, batch=None):
        return IndexMap(torch.arange(n), None, n)

    def nearest(self, m):
        return IndexMap(assignment_src(m), None, m.shape[0])

    def latent(self, e, batch=None):
        return e.matrix().float()

    def project(self, z, hard=False, soft=False):
        if hard:
            return hard_permutation(z)
        return sinkhorn(z) if soft else hungarian_ste(z)

    def differentiable(self, z, hard=False, soft=False):
        p = self.project(z, hard=hard, soft=soft)
        return DenseMap(p) if soft and not hard else PermutationDenseMap(p)

    def element(self, dense):
        return IndexMap(src_of(dense.detach().cpu()), None, dense.shape[0])


@register_kind
class GroupedPermutation(Permutation):
    """Permutations of n = batch·r entries that keep each block of r consecutive entries in place (the query
    heads of one key/value head under grouped-query attention). Elements are plain index maps of size n;
    `nearest` takes the batch of per-block cross-correlations [batch, r, r], `latent` needs the block count."""

    name = "grouped-permutation"

    def random(self, n, batch, gen):
        r = n // (batch or 1)
        src = torch.cat([torch.randperm(r, generator=gen) + g * r for g in range(n // r)])
        return IndexMap(src, None, n)

    def nearest(self, m):
        """m: [batch, r, r], rows old and columns new entries of each block."""
        r = m.shape[-1]
        src = torch.cat([assignment_src(block) + g * r for g, block in enumerate(m)])
        return IndexMap(src, None, m.shape[0] * r)

    def latent(self, e, batch=None):
        if batch is None:
            raise ValueError("a grouped permutation's latent needs its block count (batch)")
        r = e.n // batch
        dense = e.matrix().float()
        return torch.stack([dense[g * r:(g + 1) * r, g * r:(g + 1) * r] for g in range(batch)])

    def project(self, z, hard=False, soft=False):
        """z: [batch, r, r] → the block-diagonal [n, n] matrix of per-block projections."""
        return torch.block_diag(*(Permutation.project(self, block, hard, soft) for block in z))


@register_kind
class SemiPermutation(Kind):
    """Splits n units into m = n + n/2 non-negative copies (exact where f(αx) = αf(x): ReLU)."""

    name = "semi-permutation"
    invertible = False

    def random(self, n, batch, gen):
        m = n + max(1, n // 2)
        extra = torch.randint(0, n, (m - n,), generator=gen)
        src = torch.cat([torch.arange(n), extra])[torch.randperm(m, generator=gen)]
        w = torch.rand(m, generator=gen, dtype=torch.float64) + 0.1
        totals = torch.zeros(n, dtype=torch.float64).index_add_(0, src, w)
        return IndexMap(src, (w / totals[src]).float(), n)


@register_kind
class ZeroPad(Kind):
    """Extra all-zero units (a wider layer computing the same function)."""

    name = "zero-pad"
    invertible = False

    def random(self, n, batch, gen):
        return zero_pad(n, n + max(1, n // 4))


def zero_pad(n: int, m: int) -> IndexMap:
    return IndexMap(torch.cat([torch.arange(n), torch.full((m - n,), -1)]), None, n)
