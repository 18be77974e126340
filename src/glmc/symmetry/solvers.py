"""The per-head solvers that group kinds own (glmc/symmetry/kinds): comparing two heads' circuits, and fitting a
map C of a kind to a pair of factors (x·C on one side, x·C^-T on the other: a head's query/key or value/output).

Factors are [H, k, m] (per head, k head dimensions, m = the stream's width plus a bias column); a fitted map C is
returned in the column action q ↦ C·q, [H, k, k] (its transpose is the row-action element, x ↦ x·Cᵀ).
"""

from __future__ import annotations

import torch


def scale_rotation_matrix(ab: torch.Tensor) -> torch.Tensor:
    """[..., k/2, 2] plane coefficients (a, b) → [..., k, k]: a·I + b·J on every plane (i, i + k/2), in the row
    action x ↦ x·M."""
    a, b = ab[..., 0], ab[..., 1]
    da, db = torch.diag_embed(a), torch.diag_embed(b)
    top = torch.cat([da, db], -1)
    bottom = torch.cat([-db, da], -1)
    return torch.cat([top, bottom], -2)


# --- comparing heads ------------------------------------------------------------------------------------------

def circuit_similarity(x_a, y_a, x_b, y_b) -> torch.Tensor:
    """S[h, j] = ⟨X_a,hᵀ·Y_a,h, X_b,jᵀ·Y_b,j⟩ without forming the d×d circuits."""
    gx = torch.einsum("hpd,jqd->hjpq", x_a, x_b)
    gy = torch.einsum("hpd,jqd->hjpq", y_a, y_b)
    return (gx * gy).sum((-1, -2))


def rotary_circuit_similarity(x_a, y_a, x_b, y_b) -> torch.Tensor:
    """S[h, j] = Σ_planes Re⟨M_a,h,p, M_b,j,p⟩ for the per-plane circuits of rotary attention: with plane p of a
    head as complex rows z = row p + i·row (p + k/2), the score of positions t, s is Σ_p Re(e^{iθ_p(t−s)}·x_tᵀ·M_p·x_s)
    with M_p = z_x,p ⊗ conj(z_y,p). Invariant under exactly the scale-rotation QK maps (z_x ↦ c·z_x, z_y ↦ z_y/c̄),
    and blind to the cross-plane terms of XᵀY, which rotary attention never computes."""
    h = x_a.shape[-2] // 2

    def planes(t):
        return torch.complex(t[..., :h, :], t[..., h:, :])

    gx = torch.einsum("hpd,jpd->hjp", planes(x_a), planes(x_b).conj())
    gy = torch.einsum("hpd,jpd->hjp", planes(y_a).conj(), planes(y_b))
    return (gx * gy).real.sum(-1)


# --- closed-form fits ------------------------------------------------------------------------------------------

def best_complex_scale(zx_b, zx_a, zy_b, zy_a, nx, ny) -> torch.Tensor:
    """Per entry of the leading dims, the complex c minimising ‖c·zx_b − zx_a‖²/nx + ‖zy_b/c̄ − zy_a‖²/ny (last
    axis summed): the best of the two closed-form least-squares solutions (X side alone, Y side alone) and
    their geometric mean. Real inputs give a real c (a per-unit scale) without a complex copy. Every loss is
    evaluated from three sums per side (‖z‖², ⟨z, w⟩, ‖w‖²), so the factors are read once: for a 1.1B Llama's
    MLP scales that is 1 s an iteration where evaluating each candidate on the factors took 68 s."""
    sx, sy = _sums(zx_b, zx_a), _sums(zy_b, zy_a)
    cx = sx[1] / sx[0].clamp_min(1e-30)  # argmin_c ‖c·z − w‖²
    d = sy[1] / sy[0].clamp_min(1e-30)  # zy_b·d ≈ zy_a with d = 1/c̄
    cy = 1 / d.conj().where(d.abs() > 1e-30, torch.ones_like(d))
    mean = (cx.abs() * cy.abs()).sqrt() * torch.sgn(torch.sgn(cx) + torch.sgn(cy)).where(
        (torch.sgn(cx) + torch.sgn(cy)).abs() > 1e-12, torch.sgn(cx))
    cands = torch.stack([cx, cy, mean])

    def loss(c):
        cs = c.where(c.abs() > 1e-30, torch.ones_like(c))
        return _fit(cs, sx) / nx + _fit(1 / cs.conj(), sy) / ny

    losses = torch.stack([loss(c) for c in cands]).nan_to_num(float("inf"))
    best = cands.gather(0, losses.argmin(0, keepdim=True))[0]
    # an all-zero entry (a zero-padded head or unit of an embedded narrower model) fits any c: keep it invertible
    return best.where(best.abs() > 1e-12, torch.ones_like(best))


_FLOAT64_PRODUCTS_UP_TO = 1 << 18


def _sums(z, w) -> tuple:
    """(‖z‖², ⟨z, w⟩ = Σ z̄·w, ‖w‖²) over the last axis, float64 (complex128 for complex inputs). Real float32
    rows are multiplied in float32 and summed in float64 (no float64 copies of a 1.1B model's MLP)."""
    if not (z.is_complex() or w.is_complex()):
        if z.numel() <= _FLOAT64_PRODUCTS_UP_TO:  # small ones (planted-symmetry checks) stay exact to ~1e-15
            z, w = z.double(), w.double()
        return tuple((x * y).sum(-1, dtype=torch.float64) for x, y in ((z, z), (z, w), (w, w)))
    z, w = (t.to(torch.complex128) for t in (z, w))
    return (z.abs() ** 2).sum(-1), (z.conj() * w).sum(-1), (w.abs() ** 2).sum(-1)


def _fit(c, sums) -> torch.Tensor:
    """‖c·z − w‖² from _sums: |c|²‖z‖² − 2·Re(c·⟨w, z⟩) + ‖w‖², never below 0."""
    zz, zw, ww = sums
    return ((c.abs() ** 2) * zz - 2 * (c * zw.conj()).real + ww).clamp_min(0)


def fit_scale_rotation(xa, xb, ya, yb) -> torch.Tensor:
    """Per-head scale-rotation maps C (per rotary plane (i, i + k/2) a·I + b·J, C^-T = C/(a²+b²)), each plane in
    closed form (Tran et al. 2026): as a complex number c = a + ib acting on z = row i + i·row (i + k/2)."""
    h = xa.shape[-2] // 2

    def planes(t):
        return torch.complex(t[..., :h, :].double(), t[..., h:, :].double())

    nx = xa.pow(2).sum((-1, -2)).clamp_min(1e-30)[..., None]
    ny = ya.pow(2).sum((-1, -2)).clamp_min(1e-30)[..., None]
    c = best_complex_scale(planes(xb), planes(xa), planes(yb), planes(ya), nx, ny)
    # C = [[a, −b], [b, a]] per plane (column action q ↦ C·q); scale_rotation_matrix is the row action Cᵀ
    return scale_rotation_matrix(torch.stack([c.real, -c.imag], -1))


# --- per-head invertible maps --------------------------------------------------------------------------------

class FactorGrams:
    """The k×k Gram blocks the per-head fit needs (X_B·X_Bᵀ, X_A·X_Bᵀ, ‖X_A‖², likewise for Y): the objective
    ‖C·X_B − X_A‖² = tr(C·G_BB·Cᵀ) − 2⟨C, G_AB⟩ + ‖X_A‖² and its closed-form starts depend on the factors only
    through them, so the solver works on k×k matrices instead of k×(d+1) ones (d/k times less work per step)."""

    def __init__(self, xa, xb, ya, yb):
        xa, xb, ya, yb = (t.double() for t in (xa, xb, ya, yb))
        self.xbb, self.xab = xb @ xb.transpose(-1, -2), xa @ xb.transpose(-1, -2)
        self.ybb, self.yab = yb @ yb.transpose(-1, -2), ya @ yb.transpose(-1, -2)
        self.nx = xa.pow(2).sum((-1, -2)).clamp_min(1e-30)
        self.ny = ya.pow(2).sum((-1, -2)).clamp_min(1e-30)

    @classmethod
    def cat(cls, parts: list["FactorGrams"]) -> "FactorGrams":
        """One problem of all the parts' heads (every layer's), solved in one batch."""
        out = cls.__new__(cls)
        for name in ("xbb", "xab", "ybb", "yab", "nx", "ny"):
            setattr(out, name, torch.cat([getattr(p, name) for p in parts]))
        return out

    def to(self, dtype) -> "FactorGrams":
        out = self.__class__.__new__(self.__class__)
        for name in ("xbb", "xab", "ybb", "yab", "nx", "ny"):
            setattr(out, name, getattr(self, name).to(dtype))
        return out

    def loss(self, c):
        """Per head: ‖C·X_B − X_A‖²/‖X_A‖² + ‖C^-T·Y_B − Y_A‖²/‖Y_A‖²."""
        return self.loss_and_grad(c, grad=False)[0]

    def loss_and_grad(self, c, grad: bool = True):
        """(per-head loss, its gradient in C or None), in closed form: with D = C^-T, dD = −D·dCᵀ·D, so a
        gradient G_D in D is −D·G_Dᵀ·D in C. About twice as fast as autograd through the inverse, and L-BFGS
        evaluates this ~65 times per role and iteration."""
        d = torch.linalg.inv(c.transpose(-1, -2))
        cg, dg = c @ self.xbb, d @ self.ybb
        fit_x = ((cg * c).sum((-1, -2)) - 2 * (c * self.xab).sum((-1, -2))) / self.nx + 1
        fit_y = ((dg * d).sum((-1, -2)) - 2 * (d * self.yab).sum((-1, -2))) / self.ny + 1
        if not grad:
            return fit_x + fit_y, None
        g_d = (dg - self.yab) * (2 / self.ny)[:, None, None]
        return fit_x + fit_y, (cg - self.xab) * (2 / self.nx)[:, None, None] - d @ g_d.transpose(-1, -2) @ d

    def starts(self) -> list[torch.Tensor]:
        """Closed-form candidates: orthogonal Procrustes on [X Y]; least squares on X alone (X_A·X_B⁺ =
        G_AB·G_BB⁺); on Y alone (C^-T·Y_B = Y_A ⇒ C = (Y_A·Y_B⁺)^-T). In an exact symmetry the least-squares ones
        are exact."""
        p, _, qt = torch.linalg.svd(self.xab + self.yab)
        out = [p @ qt, self.xab @ torch.linalg.pinv(self.xbb, hermitian=True)]
        ky = self.yab @ torch.linalg.pinv(self.ybb, hermitian=True)
        if bool((torch.linalg.matrix_rank(ky) == ky.shape[-1]).all()):
            out.append(torch.linalg.inv(ky).transpose(-1, -2))
        return out


def fit_factor_map(xa, xb, ya, yb, steps: int = 60, max_cond: float = 1e4) -> torch.Tensor:
    """C [H, k, k] with C·X_B ≈ X_A and C^-T·Y_B ≈ Y_A (see the module docstring)."""
    return fit_factor_grams(FactorGrams(xa, xb, ya, yb), steps, max_cond)


# L-BFGS keeps 2·history copies of the batched maps: at torch's default 100 that was 0.9 GB for GPT-2-124M's
# 144 OV maps, and grows as layers × heads × d_head². Shorter histories gave the same barriers (decision D11), so
# 10, at a tenth the memory.
LBFGS_HISTORY = 10
LBFGS_FLOAT64_UP_TO = 1 << 16  # entries of the batched maps (16 heads of 64)


def fit_factor_grams(grams: FactorGrams, steps: int = 60, max_cond: float = 1e4) -> torch.Tensor:
    """fit_factor_map on precomputed Gram blocks. The heads are independent problems; solving every layer's at
    once in one L-BFGS run costs the optimiser's per-step overhead once instead of once per layer."""
    starts = grams.starts()
    best, best_loss = starts[0], grams.loss(starts[0])
    for s in starts[1:]:
        ok = torch.isfinite(s).all((-1, -2)) & (torch.linalg.cond(s) < max_cond)
        loss = torch.where(ok, grams.loss(torch.where(ok[:, None, None], s, best)), best_loss)
        better = loss < best_loss
        best, best_loss = torch.where(better[:, None, None], s, best), torch.where(better, loss, best_loss)
    # a big search runs in float32, twice as fast as float64 and half the memory (GPT-2-124M: 2 s and 0.15 GB per
    # iteration, the same loss to 3e-5); the starts and the acceptance test below stay float64, so an exact start
    # is never lost, and small problems stay float64 (a planted symmetry is then recovered to ~1e-9)
    dtype = torch.float32 if best.numel() > LBFGS_FLOAT64_UP_TO else torch.float64
    work = grams.to(dtype)
    c = best.to(dtype, copy=True).requires_grad_(True)
    opt = torch.optim.LBFGS([c], lr=1, max_iter=steps, line_search_fn="strong_wolfe", tolerance_grad=1e-12,
                            tolerance_change=1e-15, history_size=LBFGS_HISTORY)

    def closure():
        with torch.no_grad():
            loss, c.grad = work.loss_and_grad(c)
        return loss.sum()

    try:
        opt.step(closure)
    except (torch.linalg.LinAlgError, RuntimeError):
        return best
    refined = c.detach().double()
    ok = torch.isfinite(refined).all((-1, -2)) & (torch.linalg.cond(refined) < max_cond)
    ok &= grams.loss(torch.where(ok[:, None, None], refined, best)) < best_loss
    return torch.where(ok[:, None, None], refined, best)
