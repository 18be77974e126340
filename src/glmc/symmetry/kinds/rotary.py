"""The maps of a head's query/key dimensions that commute with rotary position embeddings (RoPE).

HF's `rotate_half` pairs head coordinate j with j + r/2 over the first r coordinates (r = d_head for full
rotary). A map commutes with every rotation of a plane iff it is a·I + b·J there (a scale times a 2-D
rotation); coordinates RoPE passes through (partial rotary) admit any invertible map, and no map may mix the two
blocks (glmc/../design/maths.md, "Partial rotary")."""

from __future__ import annotations

import torch

from glmc.symmetry.elements import LinearMap
from glmc.symmetry.kinds.base import Kind, dense, log_uniform_scales, register_kind
from glmc.symmetry.kinds.linear import Invertible
from glmc.symmetry.solvers import (
    FactorGrams,
    circuit_similarity,
    fit_scale_rotation,
    rotary_circuit_similarity,
    scale_rotation_matrix,
)


def _random_planes(shape, gen) -> torch.Tensor:
    """[..., planes, 2] coefficients (a, b) of random scale-rotations (scales in [1/2, 2], any angle)."""
    scale = log_uniform_scales(shape, gen)
    angle = torch.rand(shape, generator=gen, dtype=torch.float64) * 2 * torch.pi
    return torch.stack([scale * torch.cos(angle), scale * torch.sin(angle)], -1)


def planes_of(m: torch.Tensor) -> torch.Tensor:
    """The (a, b) of a scale-rotation matrix [..., k, k] (inverse of scale_rotation_matrix)."""
    half = m.shape[-1] // 2
    a = torch.diagonal(m[..., :half, :half], dim1=-2, dim2=-1)
    b = torch.diagonal(m[..., :half, half:], dim1=-2, dim2=-1)
    return torch.stack([a, b], -1)


@register_kind
class ScaleRotation(Invertible):
    """Per head, in every rotary plane (i, i + k/2): a·I + b·J, a scale times a 2-D rotation. These are exactly
    the maps that commute with every RoPE rotation, so they are the QK maps rotary attention admits."""

    name = "scale-rotation"
    contains = ()

    matrix = staticmethod(scale_rotation_matrix)
    planes = staticmethod(planes_of)

    def random(self, n, batch, gen):
        if n % 2:
            raise ValueError("scale-rotation maps need an even head size")
        return LinearMap(self.matrix(_random_planes((() if batch is None else (batch,)) + (n // 2,), gen)))

    def head_similarity(self, x_a, y_a, x_b, y_b):
        return rotary_circuit_similarity(x_a, y_a, x_b, y_b)

    def fit_head_maps(self, xa, xb, ya, yb):
        return fit_scale_rotation(xa, xb, ya, yb)

    head_problem = Kind.head_problem
    solve_head_problems = Kind.solve_head_problems

    def latent(self, e, batch=None):
        return self.planes(dense(e)).float().clone()

    def project(self, z, hard=False, soft=False):
        return self.matrix(z)


@register_kind
class PartialRotary(Invertible):
    """Partial rotary (GPT-NeoX / Pythia, Phi): RoPE rotates the first `rotary` of a head's k coordinates (planes
    (j, j + rotary/2)) and passes the other k − rotary through. The QK maps are block diagonal: a scale-rotation
    on each rotary plane ⊕ any invertible map of the pass-through block. Parameter `rotary` (even, ≤ k; default
    half the head, rounded down to even)."""

    name = "partial-rotary"
    contains = ()

    @classmethod
    def parameters(cls):
        return ("rotary",)

    def rotary(self, n: int) -> int:
        r = self.params.get("rotary")
        r = 2 * (n // 4) if r is None else int(r)
        if r % 2 or not 0 <= r <= n:
            raise ValueError(f"partial-rotary maps need an even number of rotary dimensions ≤ {n}, got {r}")
        return r

    def _join(self, rot: torch.Tensor, free: torch.Tensor) -> torch.Tensor:
        """[..., r, r] ⊕ [..., p, p] → [..., r + p, r + p] block diagonal."""
        r, p = rot.shape[-1], free.shape[-1]
        out = rot.new_zeros(*rot.shape[:-2], r + p, r + p)
        out[..., :r, :r] = rot
        out[..., r:, r:] = free.to(rot.dtype)
        return out

    def random(self, n, batch, gen):
        r = self.rotary(n)
        shape = () if batch is None else (batch,)
        rot = scale_rotation_matrix(_random_planes(shape + (r // 2,), gen))
        free = Invertible.random(self, n - r, batch, gen).matrix if n > r else torch.zeros(*shape, 0, 0)
        return LinearMap(self._join(rot, free.double()))

    def head_similarity(self, x_a, y_a, x_b, y_b):
        r = self.rotary(x_a.shape[-2])
        s = rotary_circuit_similarity(x_a[..., :r, :], y_a[..., :r, :], x_b[..., :r, :], y_b[..., :r, :])
        if x_a.shape[-2] > r:
            s = s + circuit_similarity(x_a[..., r:, :], y_a[..., r:, :], x_b[..., r:, :], y_b[..., r:, :])
        return s

    def head_problem(self, xa, xb, ya, yb):
        """(the rotary planes' maps, solved in closed form now; the pass-through block's Gram blocks)."""
        r = self.rotary(xa.shape[-2])
        rot = fit_scale_rotation(xa[..., :r, :], xb[..., :r, :], ya[..., :r, :], yb[..., :r, :])
        free = FactorGrams(xa[..., r:, :], xb[..., r:, :], ya[..., r:, :], yb[..., r:, :]) if xa.shape[-2] > r else None
        return rot, free

    def solve_head_problems(self, problems):
        frees = [f for _, f in problems if f is not None]
        solved = iter(Invertible.solve_head_problems(self, frees))
        return [rot if free is None else self._join(rot, next(solved)) for rot, free in problems]

    def fit_head_maps(self, xa, xb, ya, yb):
        return self.solve_head_problems([self.head_problem(xa, xb, ya, yb)])[0]

    def latent(self, e, batch=None):
        return dense(e).float().clone()

    def project(self, z, hard=False, soft=False):
        """The block-diagonal map nearest in structure: each rotary plane's (a, b) averaged from z's entries, and
        z's pass-through block as it is (z's other entries do not enter)."""
        n = z.shape[-1]
        r = self.rotary(n)
        rot = z[..., :r, :r]
        half = r // 2
        a = (torch.diagonal(rot[..., :half, :half], dim1=-2, dim2=-1)
             + torch.diagonal(rot[..., half:, half:], dim1=-2, dim2=-1)) / 2
        b = (torch.diagonal(rot[..., :half, half:], dim1=-2, dim2=-1)
             - torch.diagonal(rot[..., half:, :half], dim1=-2, dim2=-1)) / 2
        rot = scale_rotation_matrix(torch.stack([a, b], -1))
        top = torch.cat([rot, z.new_zeros(*z.shape[:-2], r, n - r)], -1)
        bottom = torch.cat([z.new_zeros(*z.shape[:-2], n - r, r), z[..., r:, r:]], -1)
        return torch.cat([top, bottom], -2)
