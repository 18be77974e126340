"""Group kinds: what a symmetry group *is*, as opposed to where it acts (glmc/symmetry/spec.py).

An adapter declares, per role (residual, heads, qk, ov, mlp, …), one kind from `KINDS` and a size; everything
that needs to know the group reads the kind from here, never from a group's name:

  random(n, batch, gen)      a random element (tests, `glmc verify`)
  identity(n, batch)         the neutral element
  nearest(m)                 the element E maximising ⟨E, M⟩ for a cross-correlation M whose rows index the
                             old coordinates and columns the new ones (x ↦ x·E): weight and activation matching
  latent(e) / project(z)     learned matching's parameters, started at element e, and their (differentiable)
                             projection onto the group as a dense matrix (`hard`: the exact element's matrix)
  differentiable(z)          the projection as an element that acts on tensors (learned matching's forward and
                             backward): a DenseMap of `project`, or a structured form with the same values and
                             gradients (indexing for permutations, elementwise scales for diagonals)
  element(dense)             the exact element a hard projection stands for
  embed(n, m)                residual kinds only: the exact rectangular map of an N-wide stream into an M-wide
                             one that widening uses (its readers' and writers' side of the same group)

Kinds (⊂ means "is a subgroup of", which `admits` answers):
  permutation ⊂ signed-permutation ⊂ orthogonal;  permutation ⊂ orthogonal-fixing-ones ⊂ orthogonal ⊂ invertible
  grouped-permutation (permutations of n entries inside each of `batch` consecutive blocks: query heads within
  their key/value group), diagonal (non-zero scales, contravariant side 1/s), scale-rotation (per rotary
  plane (i, i + k/2) of a head, a scale times a 2-D rotation: the maps that commute with RoPE), and two
  non-invertible extensions that still keep the function where declared: semi-permutation (ReLU units split
  into copies) and zero-pad (extra zero units).
"""

from __future__ import annotations

import math

import torch
from scipy.optimize import linear_sum_assignment

from glmc.symmetry.elements import DenseMap, DiagonalDenseMap, IndexMap, LinearMap, PermutationDenseMap, ScaleMap
from glmc.symmetry.projections import hard_permutation, hungarian_ste, polar, sinkhorn, src_of


def random_orthogonal(n: int, gen: torch.Generator, batch: tuple = ()) -> torch.Tensor:
    a = torch.randn(*batch, n, n, generator=gen, dtype=torch.float64)
    q, r = torch.linalg.qr(a)
    return q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)  # sign fix: Haar distributed


def ones_complement_basis(d: int) -> torch.Tensor:
    """Orthonormal basis U (d×(d−1)) of the hyperplane orthogonal to the all-ones vector."""
    eye = torch.eye(d, dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.cat([torch.ones(d, 1, dtype=torch.float64), eye[:, : d - 1]], 1))
    return q[:, 1:]


def assignment_src(m: torch.Tensor) -> torch.Tensor:
    """src with Σ_j m[src[j], j] maximal: new coordinate j takes old coordinate src[j]."""
    rows, cols = linear_sum_assignment(m.detach().cpu().double().numpy(), maximize=True)
    src = torch.empty(m.shape[1], dtype=torch.long)
    src[torch.as_tensor(cols)] = torch.as_tensor(rows)
    return src


class Kind:
    name = ""
    invertible = True
    orthogonal = True  # the contravariant action equals the covariant one
    discrete = False  # learned through a straight-through hard projection (a one-hot latent)
    contains: tuple = ()  # kinds that are subgroups of this one

    def admits(self, kind: str) -> bool:
        return kind == self.name or kind in self.contains

    def _missing(self, what):
        raise NotImplementedError(f"group kind {self.name!r} has no {what}")

    def random(self, n, batch, gen):
        self._missing("random elements")

    def identity(self, n, batch=None):
        self._missing("identity")

    def nearest(self, m):
        self._missing("closed-form nearest element")

    def latent(self, e, batch=None) -> torch.Tensor:
        self._missing("learned parametrisation")

    def project(self, z, hard=False, soft=False) -> torch.Tensor:
        self._missing("learned parametrisation")

    def differentiable(self, z, hard=False, soft=False):
        return DenseMap(self.project(z, hard=hard, soft=soft), self.orthogonal)

    def element(self, dense):
        self._missing("learned parametrisation")

    def embed(self, n, m, gen=None):
        self._missing("rectangular embedding (widening)")


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


class Orthogonal(Kind):
    name = "orthogonal"
    contains = ("orthogonal-fixing-ones", "signed-permutation", "permutation")

    def random(self, n, batch, gen):
        return LinearMap(random_orthogonal(n, gen, () if batch is None else (batch,)))

    def identity(self, n, batch=None):
        eye = torch.eye(n, dtype=torch.float64)
        return LinearMap(eye if batch is None else eye.expand(batch, n, n).clone())

    def nearest(self, m):
        p, _, qt = torch.linalg.svd(m.double())
        return LinearMap(p @ qt)

    def latent(self, e, batch=None):
        return _dense(e).float().clone()

    def project(self, z, hard=False, soft=False):
        return polar(z)

    def element(self, dense):
        return LinearMap(dense.detach().cpu().double())

    def embed(self, n, m, gen=None):
        """O ∈ R^{N×M} with orthonormal rows ([I 0], or random rows with `gen`)."""
        if gen is None:
            return torch.eye(n, m, dtype=torch.float64)
        return random_orthogonal(m, gen)[:n]


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

    def latent(self, e, batch=None):
        u = self.basis(e.n)
        return (u.T @ _dense(e).double() @ u).float()

    def project(self, z, hard=False, soft=False):
        return self._compose(polar(z))

    def embed(self, n, m, gen=None):
        """O = 1_N·1_Mᵀ/√(NM) + U_N·R·U_Mᵀ (R: (N−1)×(M−1) with orthonormal rows): O·Oᵀ = I and O maps mean-zero
        streams to mean-zero streams."""
        r = torch.eye(n - 1, m - 1, dtype=torch.float64) if gen is None else random_orthogonal(m - 1, gen)[: n - 1]
        return (torch.ones(n, m, dtype=torch.float64) / math.sqrt(n * m)
                + ones_complement_basis(n) @ r @ ones_complement_basis(m).T)


class SignedPermutation(Orthogonal):
    """Permutations with signs: the residual maps that commute with a norm's elementwise gain."""

    name = "signed-permutation"
    contains = ("permutation",)
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

    def project(self, z, hard=False, soft=False):
        h = self._hard(z)
        return h if hard else h + z - z.detach()

    def differentiable(self, z, hard=False, soft=False):
        return PermutationDenseMap(self.project(z, hard=hard, soft=soft))


class Invertible(Kind):
    name = "invertible"
    orthogonal = False
    contains = ("orthogonal", "orthogonal-fixing-ones", "signed-permutation", "permutation", "scale-rotation",
                "diagonal")

    def random(self, n, batch, gen, cond: float = 4.0):
        """Well-conditioned: orthogonal · diag(singular values in [1/√cond, √cond]) · orthogonal."""
        shape = () if batch is None else (batch,)
        u, v = random_orthogonal(n, gen, shape), random_orthogonal(n, gen, shape)
        s = torch.exp((torch.rand(*shape, n, generator=gen, dtype=torch.float64) - 0.5) * math.log(cond))
        return LinearMap(u @ torch.diag_embed(s) @ v)

    identity = Orthogonal.identity

    def latent(self, e, batch=None):
        return _dense(e).float().clone()

    def project(self, z, hard=False, soft=False):
        return z

    def element(self, dense):
        return LinearMap(dense.detach().cpu())


class ScaleRotation(Invertible):
    """Per head, in every rotary plane (i, i + k/2): a·I + b·J, a scale times a 2-D rotation. These are exactly
    the maps that commute with every RoPE rotation, so they are the QK maps rotary attention admits."""

    name = "scale-rotation"
    contains = ()

    @staticmethod
    def matrix(ab: torch.Tensor) -> torch.Tensor:
        """[..., k/2, 2] plane coefficients (a, b) → [..., k, k] (row-vector action x ↦ x·M)."""
        a, b = ab[..., 0], ab[..., 1]
        da, db = torch.diag_embed(a), torch.diag_embed(b)
        top = torch.cat([da, db], -1)
        bottom = torch.cat([-db, da], -1)
        return torch.cat([top, bottom], -2)

    @staticmethod
    def planes(m: torch.Tensor) -> torch.Tensor:
        """The (a, b) of a scale-rotation matrix (inverse of `matrix`)."""
        half = m.shape[-1] // 2
        a = torch.diagonal(m[..., :half, :half], dim1=-2, dim2=-1)
        b = torch.diagonal(m[..., :half, half:], dim1=-2, dim2=-1)
        return torch.stack([a, b], -1)

    def random(self, n, batch, gen):
        if n % 2:
            raise ValueError("scale-rotation maps need an even head size")
        shape = (() if batch is None else (batch,)) + (n // 2,)
        scale = torch.exp((torch.rand(shape, generator=gen, dtype=torch.float64) - 0.5) * math.log(4.0))
        angle = torch.rand(shape, generator=gen, dtype=torch.float64) * 2 * math.pi
        return LinearMap(self.matrix(torch.stack([scale * torch.cos(angle), scale * torch.sin(angle)], -1)))

    def latent(self, e, batch=None):
        return self.planes(_dense(e)).float().clone()

    def project(self, z, hard=False, soft=False):
        return self.matrix(z)


class Diagonal(Kind):
    """Non-zero scales per unit: x·diag(s) on one side, x·diag(1/s) on the other (SwiGLU's up/down)."""

    name = "diagonal"
    orthogonal = False

    def random(self, n, batch, gen):
        mag = torch.exp((torch.rand(n, generator=gen, dtype=torch.float64) - 0.5) * math.log(4.0))
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


class ZeroPad(Kind):
    """Extra all-zero units (a wider layer computing the same function)."""

    name = "zero-pad"
    invertible = False

    def random(self, n, batch, gen):
        return zero_pad(n, n + max(1, n // 4))


def zero_pad(n: int, m: int) -> IndexMap:
    return IndexMap(torch.cat([torch.arange(n), torch.full((m - n,), -1)]), None, n)


def _dense(e) -> torch.Tensor:
    return e.matrix() if isinstance(e, IndexMap) else e.matrix


KINDS: dict[str, Kind] = {k.name: k for k in (Permutation(), GroupedPermutation(), Orthogonal(), OrthogonalFixingOnes(),
                                               SignedPermutation(), Invertible(), ScaleRotation(), Diagonal(),
                                               SemiPermutation(), ZeroPad())}


def kind(name: str) -> Kind:
    if name not in KINDS:
        raise ValueError(f"unknown group kind {name!r}; known: {', '.join(KINDS)}")
    return KINDS[name]
