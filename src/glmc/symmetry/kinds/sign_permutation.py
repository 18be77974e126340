"""Permutations with one global sign (±P): the residual maps that commute with a LayerNorm whose gain and bias sit on
the stream's coordinates (post-LN encoders; derivation in glmc/symmetry/declarations.py). A per-coordinate sign
would change the LayerNorm's mean; a global one negates it, and the bias is moved with the stream."""

from __future__ import annotations

import torch

from glmc.symmetry.elements import LinearMap
from glmc.symmetry.kinds import assignment_src, register_kind
from glmc.symmetry.kinds.orthogonal import SignedPermutation


@register_kind
class SignPermutation(SignedPermutation):
    name = "sign-permutation"
    contains = ("permutation",)

    def random(self, n, batch, gen):
        sign = float(torch.randint(0, 2, (1,), generator=gen)) * 2 - 1
        m = torch.zeros(n, n, dtype=torch.float64)
        m[torch.randperm(n, generator=gen), torch.arange(n)] = sign
        return LinearMap(m)

    def identity(self, n, batch=None):
        return LinearMap(torch.eye(n, dtype=torch.float64))

    def _hard(self, z):
        """σ·P maximising ⟨σP, Z⟩: the better of the assignments on Z and on −Z."""
        return self._signed(z, self._sign(z))

    def nearest_per_sign(self, m):
        """[+P, −P′]: for each global sign the permutation maximising ⟨σP, M⟩."""
        m = m.double()
        return [LinearMap(self._signed(m, sign)) for sign in (1.0, -1.0)]

    @staticmethod
    def _sign(z) -> float:
        cols = torch.arange(z.shape[1], device=z.device)
        scores = {}
        for sign in (1.0, -1.0):
            src = assignment_src(sign * z).to(z.device)
            scores[sign] = float(sign * z.detach()[src, cols].sum())
        return max(scores, key=lambda s: (scores[s], s))

    @staticmethod
    def _signed(z, sign: float):
        cols = torch.arange(z.shape[1], device=z.device)
        m = torch.zeros_like(z)
        m[assignment_src(sign * z).to(z.device), cols] = sign
        return m
