"""Differentiable projections onto symmetry groups, for learned matching.

* `polar(Z)` — the orthogonal polar factor U·Vᵀ of Z = U·Σ·Vᵀ, with a hand-written backward: the derivative of
  the polar factor only involves 1/(σ_i + σ_j), which is finite for any full-rank Z, whereas autograd through
  `torch.linalg.svd` divides by σ_i² − σ_j² and returns NaN at an orthogonal Z (where every σ is 1) — which is
  exactly where learned matching starts.
* `hungarian_ste(Z)` — the permutation matrix maximising ⟨P, Z⟩ (linear assignment), with a straight-through
  gradient: the forward value is the hard permutation, the backward is the identity onto Z.
* `sinkhorn(Z)` — a doubly stochastic soft permutation (Sinkhorn normalisation of exp(Z/τ)).
"""

from __future__ import annotations

import torch


class _Polar(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        u, s, vh = torch.linalg.svd(z)
        ctx.save_for_backward(u, s, vh)
        return u @ vh

    @staticmethod
    def backward(ctx, g):
        u, s, vh = ctx.saved_tensors
        m = u.transpose(-1, -2) @ g @ vh.transpose(-1, -2)
        k = (m - m.transpose(-1, -2)) / (s.unsqueeze(-1) + s.unsqueeze(-2))
        return u @ k @ vh


def polar(z: torch.Tensor) -> torch.Tensor:
    return _Polar.apply(z)


def hard_permutation(z: torch.Tensor) -> torch.Tensor:
    """P (0/1) maximising Σ P ⊙ Z; rows are the new positions' sources in the x·P convention: P[src[j], j] = 1.
    Where every column's largest entry lies in a different row, those entries are the assignment (their sum
    bounds every other), so the solver is skipped: learned matching's latents stay near one-hot, where this
    holds at almost every step."""
    src = z.detach().argmax(0)
    p = torch.zeros_like(z)
    if torch.unique(src).numel() == z.shape[1]:
        p[src, torch.arange(z.shape[1], device=z.device)] = 1.0
        return p
    from scipy.optimize import linear_sum_assignment  # scipy.optimize: 0.25 s to import, needed here only

    rows, cols = linear_sum_assignment(z.detach().cpu().double().numpy(), maximize=True)
    p[torch.as_tensor(rows), torch.as_tensor(cols)] = 1.0
    return p


def hungarian_ste(z: torch.Tensor) -> torch.Tensor:
    p = hard_permutation(z)
    return p + z - z.detach()


def sinkhorn(z: torch.Tensor, tau: float = 0.05, iterations: int = 20) -> torch.Tensor:
    log_p = z / tau
    for _ in range(iterations):
        log_p = log_p - torch.logsumexp(log_p, dim=-1, keepdim=True)
        log_p = log_p - torch.logsumexp(log_p, dim=-2, keepdim=True)
    return log_p.exp()


def src_of(p: torch.Tensor) -> torch.Tensor:
    """The IndexMap source vector of a hard permutation matrix (P[src[j], j] = 1)."""
    return p.argmax(0)
