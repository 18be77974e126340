"""Discrete per-head group kinds: what is left inside a head when a nonlinearity sits between a projection and
RoPE (docs/families-qwen3-gemma-olmo.md has the derivations).

  plane-sign          per rotary plane (i, i + k/2) of a head, ±I: the maps that commute with a per-head RMS
                      normalisation, its generic per-coordinate gains and RoPE together (Qwen3's QK-norm)
  plane-quarter-turn  per rotary plane one of I, J, −I, −J (J the plane's 90° rotation): the signed permutations
                      that commute with RoPE, so with an elementwise symmetric clamp too (OLMo's clip_qkv, QK side)
  head-signed-permutation  signed permutations of a head's coordinates, one per (key/value) head: the maps that
                      commute with an elementwise symmetric clamp (OLMo's clip_qkv, OV side); unbatched it is the
                      residual's signed-permutation kind, draw for draw

Every kind here is orthogonal (its contravariant action equals its covariant one) and discrete: learned
matching moves it through a straight-through hard projection of a latent. The per-head fit (`fit_head_maps`,
C·X_B ≈ X_A and C^-T·Y_B = C·Y_B ≈ Y_A, C in the column action q ↦ C·q) is closed-form: with C orthogonal the
objective is linear in C, ⟨C, X_A·X_Bᵀ/‖X_A‖² + Y_A·Y_Bᵀ/‖Y_A‖²⟩, so the best element is the group's nearest one
to that correlation. The plane kinds compare heads per rotary plane (rotary_circuit_similarity), which their
maps (scale-rotations) leave unchanged.
"""

from __future__ import annotations

import torch

from glmc.symmetry.elements import DenseMap, LinearMap
from glmc.symmetry.kinds.base import Kind, register_kind
from glmc.symmetry.kinds.orthogonal import SignedPermutation
from glmc.symmetry.kinds.rotary import planes_of
from glmc.symmetry.solvers import rotary_circuit_similarity, scale_rotation_matrix


def head_correlation(xa, xb, ya, yb) -> torch.Tensor:
    """[b, k, k] M = X_A·X_Bᵀ/‖X_A‖² + Y_A·Y_Bᵀ/‖Y_A‖² per head (factors [b, k, m], float64): for orthogonal C
    the per-head fit maximises ⟨C, M⟩."""
    xa, xb, ya, yb = (t.double() for t in (xa, xb, ya, yb))
    nx = xa.pow(2).sum((-1, -2)).clamp_min(1e-30)[:, None, None]
    ny = ya.pow(2).sum((-1, -2)).clamp_min(1e-30)[:, None, None]
    return xa @ xb.transpose(-1, -2) / nx + ya @ yb.transpose(-1, -2) / ny


def _batch_shape(batch) -> tuple:
    return () if batch is None else (batch,)


class RotaryPlanes(Kind):
    """What the per-plane kinds share: heads compared per rotary plane, closed-form fits, orthogonal elements."""

    discrete = True

    def head_similarity(self, x_a, y_a, x_b, y_b):
        return rotary_circuit_similarity(x_a, y_a, x_b, y_b)

    def fit_head_maps(self, xa, xb, ya, yb) -> torch.Tensor:
        return self.nearest(head_correlation(xa, xb, ya, yb)).matrix

    def differentiable(self, z, hard=False, soft=False):
        return DenseMap(self.project(z, hard=hard), orthogonal=True)

    def element(self, dense):
        return LinearMap(dense.detach().cpu().double())


@register_kind
class PlaneSign(RotaryPlanes):
    """Per head, s_p ∈ {+1, −1} on both coordinates of every rotary plane p: diag(s, s) with s ∈ {±1}^(k/2)."""

    name = "plane-sign"

    @staticmethod
    def matrix(s: torch.Tensor) -> torch.Tensor:
        """[..., k/2] plane signs → [..., k, k] diagonal matrix (either action: it is symmetric)."""
        return torch.diag_embed(torch.cat([s, s], -1))

    def random(self, n, batch, gen):
        if n % 2:
            raise ValueError("plane signs need an even head size")
        s = torch.randint(0, 2, _batch_shape(batch) + (n // 2,), generator=gen).double() * 2 - 1
        return LinearMap(self.matrix(s))

    def identity(self, n, batch=None):
        return LinearMap(self.matrix(torch.ones(_batch_shape(batch) + (n // 2,), dtype=torch.float64)))

    def nearest(self, m):
        """The plane signs maximising ⟨E, M⟩: per plane the sign of the trace of M's 2×2 diagonal block."""
        h = m.shape[-1] // 2
        d = torch.diagonal(m.double(), dim1=-2, dim2=-1)
        return LinearMap(self.matrix(torch.where(d[..., :h] + d[..., h:] >= 0, 1.0, -1.0).double()))

    def latent(self, e, batch=None):
        h = e.n // 2
        return torch.diagonal(e.matrix, dim1=-2, dim2=-1)[..., :h].float().clone()

    def project(self, z, hard=False, soft=False):
        s = torch.where(z >= 0, 1.0, -1.0).to(z.dtype)
        return self.matrix(s if hard else s + z - z.detach())


# the four quarter turns of a plane as complex units c = a + ib (a·I + b·J)
_UNITS = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]], dtype=torch.float64)


@register_kind
class PlaneQuarterTurn(RotaryPlanes):
    """Per head and rotary plane one of I, J, −I, −J: scale-rotations (glmc/symmetry/kinds/rotary.py) whose complex
    coefficient is a unit 1, i, −1 or −i, i.e. the signed permutations among them."""

    name = "plane-quarter-turn"

    def random(self, n, batch, gen):
        if n % 2:
            raise ValueError("quarter turns need an even head size")
        pick = torch.randint(0, 4, _batch_shape(batch) + (n // 2,), generator=gen)
        return LinearMap(scale_rotation_matrix(_UNITS[pick]))

    def identity(self, n, batch=None):
        return LinearMap(scale_rotation_matrix(_UNITS[torch.zeros(_batch_shape(batch) + (n // 2,), dtype=torch.long)]))

    @staticmethod
    def _snap(ab: torch.Tensor) -> torch.Tensor:
        """[..., 2] plane coefficients (a, b) → the nearest unit among 1, i, −1, −i (maximising ⟨unit, (a, b)⟩)."""
        return _UNITS.to(ab)[(ab @ _UNITS.to(ab).T).argmax(-1)]

    def nearest(self, m):
        """The quarter turns maximising ⟨E, M⟩ (row action x ↦ x·E): per plane ⟨a·I + b·J, M_p⟩ is linear in
        (a, b), so the best unit is the one nearest to M_p's scale-rotation part."""
        m = m.double()
        h = m.shape[-1] // 2
        d = torch.diagonal(m, dim1=-2, dim2=-1)
        off = torch.diagonal(m[..., :h, h:], dim1=-2, dim2=-1) - torch.diagonal(m[..., h:, :h], dim1=-2, dim2=-1)
        return LinearMap(scale_rotation_matrix(self._snap(torch.stack([d[..., :h] + d[..., h:], off], -1))))

    def latent(self, e, batch=None):
        return planes_of(e.matrix).float().clone()

    def project(self, z, hard=False, soft=False):
        h = self._snap(z.detach()).to(z.dtype)
        return scale_rotation_matrix(h if hard else h + z - z.detach())


@register_kind
class HeadSignedPermutation(SignedPermutation):
    """Signed permutations of a head's k coordinates, a batch of independent maps (one per key/value head); without
    a batch exactly the signed-permutation kind."""

    name = "head-signed-permutation"

    def random(self, n, batch, gen):
        if batch is None:
            return super().random(n, batch, gen)
        return LinearMap(torch.stack([super(HeadSignedPermutation, self).random(n, None, gen).matrix
                                      for _ in range(batch)]))

    def identity(self, n, batch=None):
        eye = torch.eye(n, dtype=torch.float64)
        return LinearMap(eye if batch is None else eye.expand(batch, n, n).clone())

    def _hard(self, z):
        if z.ndim == 2:
            return super()._hard(z)
        return torch.stack([super(HeadSignedPermutation, self)._hard(block) for block in z])

    def fit_head_maps(self, xa, xb, ya, yb) -> torch.Tensor:
        return self._hard(head_correlation(xa, xb, ya, yb))

    def latent(self, e, batch=None):
        return e.matrix.float().clone()

    def differentiable(self, z, hard=False, soft=False):
        p = self.project(z, hard=hard, soft=soft)
        return DenseMap(p, orthogonal=True) if p.ndim == 3 else super().differentiable(z, hard, soft)
