"""Group elements that act on one axis of a tensor.

Two kinds cover every symmetry glmc uses:

* `IndexMap` — new coordinate j takes old coordinate `src[j]` (−1: a new zero coordinate), optionally scaled by
  `alpha[j]`. Permutations (alpha = 1, src a permutation), semi-permutations (a unit split into copies whose
  alphas are non-negative and sum to 1) and zero-padding into a wider layer. Applied by indexing, so
  permutations are bit-exact.
* `LinearMap` — a matrix M (n×m, batched over leading dims, e.g. one per head): orthogonal residual maps,
  rectangular orthogonal embeddings and per-head invertible maps.

Each acts on an axis in one of three modes (the spec says which, per tensor):

* ``"co"``     — the tensor lives in the space being transformed (writers into it): T' = T·M along the axis;
                 for an IndexMap, gather and scale by alpha.
* ``"contra"`` — the tensor reads from the space (readers): T' = T·M^-T (the pseudo-inverse's transpose for a
                 rectangular M); for an IndexMap, gather without scaling, so that Σ alpha = 1 recombines copies.
* ``"copy"``   — IndexMap only: gather without scaling (the QK side of a split head is copied, not split).
* ``"gain"``   — a norm's gain on residual coordinates (glmc/symmetry/declarations.py): moved by the permutation
                 part |S| of a signed permutation S, never by its signs (the gain multiplies a coordinate whose
                 sign the map flips on both sides of it). For an IndexMap it is "copy"; for a matrix, x·|M| (only
                 meaningful for signed permutations, the maps declared beside such norms).

With these conventions orthogonal maps act identically in both modes, and composition is
`(f then g).matrix == f.matrix @ g.matrix`.

Sharing: an element of size n may act on an axis of n·r entries, each index (or, for a batched map, each
copy) then serving r consecutive entries — the query heads that share one key/value head under grouped-query
attention. Which kinds of element a group allows is declared in glmc/symmetry/kinds/ and spec.py.

`DenseMap` is the differentiable form learned matching trains: a dense matrix acting in the tensor's own dtype,
with the contravariant side taken as the matrix itself when it is orthogonal. Two structured forms give the same
values and gradients at a fraction of the cost: `PermutationDenseMap` (a straight-through permutation, applied by
indexing) and `DiagonalDenseMap` (scales, applied elementwise).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch

MODES = ("co", "contra", "copy", "gain")


@dataclass
class IndexMap:
    src: torch.Tensor  # long [..., m]: old index for each new index, -1 for a new zero coordinate
    alpha: torch.Tensor | None = None  # float [..., m] or None (all ones)
    n: int | None = None  # size of the old axis (defaults to max(src)+1)

    def __post_init__(self):
        self.src = self.src.long()
        if self.n is None:
            self.n = int(self.src.max()) + 1 if self.src.numel() else 0

    @property
    def m(self) -> int:
        return self.src.shape[-1]

    @property
    def kind(self) -> str:
        if self.alpha is None and self.m == self.n and bool((self.src.sort(-1).values == torch.arange(self.n)).all()):
            return "permutation"
        if self.alpha is None:
            return "zero-pad" if self.m > self.n else "index"
        return "semi-permutation"

    def is_permutation(self) -> bool:
        return self.kind == "permutation"

    def act(self, t: torch.Tensor, axis: int, mode: str, batch_axis: int | None = None) -> torch.Tensor:
        if batch_axis is not None:
            raise ValueError("batched index maps are not supported")
        axis = axis % t.ndim
        src, alpha = self._shared(t.shape[axis])
        pad = (src < 0).any()
        out = t.index_select(axis, src.clamp(min=0).to(t.device))
        shape = [1] * t.ndim
        shape[axis] = src.shape[-1]
        if pad:
            out = out * (src >= 0).to(t.dtype).to(t.device).view(shape)
        if mode == "co" and alpha is not None:
            out = out * alpha.to(t.dtype).to(t.device).view(shape)
        return out

    def _shared(self, size: int):
        """(src, alpha) for an axis of `size` = n·r entries: block j·r + s takes block src[j]·r + s."""
        if size == self.n:
            return self.src, self.alpha
        if size % self.n:
            raise ValueError(f"an index map of size {self.n} cannot act on an axis of {size}")
        r = size // self.n
        offsets = torch.arange(r)
        src = torch.where(self.src[:, None] >= 0, self.src[:, None] * r + offsets, -1).reshape(-1)
        alpha = None if self.alpha is None else self.alpha.repeat_interleave(r)
        return src, alpha

    def inverse(self) -> "IndexMap":
        if not self.is_permutation():
            raise ValueError(f"a {self.kind} has no inverse")
        return IndexMap(torch.argsort(self.src), None, self.n)

    def then(self, g: "IndexMap") -> "IndexMap":
        """The map that applies self first, then g."""
        if not isinstance(g, IndexMap) or g.n != self.m:
            raise ValueError("can only compose index maps of matching sizes")
        src = torch.where(g.src >= 0, self.src[g.src.clamp(min=0)], torch.full_like(g.src, -1))
        alpha = None
        if self.alpha is not None or g.alpha is not None:
            a1 = self.alpha[g.src.clamp(min=0)] if self.alpha is not None else torch.ones(g.m)
            a2 = g.alpha if g.alpha is not None else torch.ones(g.m)
            alpha = a1 * a2
        return IndexMap(src, alpha, self.n)

    def matrix(self) -> torch.Tensor:
        """Dense n×m matrix of the "co" action (x·M): for checks and for learned matching's latents."""
        m = torch.zeros(self.n, self.m)
        cols = torch.arange(self.m)[self.src >= 0]
        vals = self.alpha[self.src >= 0] if self.alpha is not None else torch.ones(len(cols))
        m[self.src[self.src >= 0], cols] = vals.float()
        return m

    def tensors(self) -> dict:
        d = {"src": self.src, "n": torch.tensor(self.n)}
        if self.alpha is not None:
            d["alpha"] = self.alpha
        return d

    @classmethod
    def from_tensors(cls, d: dict) -> "IndexMap":
        return cls(d["src"], d.get("alpha"), int(d["n"]))


# the largest tensor a LinearMap moves in float64; searches that only score moved tensors (weight matching's
# passes) lower it with `float32_moves`: a similarity needs no more than float32, and GPT-2-124M's attention
# matrices, under the default, took a third of each pass
FLOAT64_UP_TO: ContextVar[int] = ContextVar("FLOAT64_UP_TO", default=1 << 20)


# inside `bfloat16_moves`, LinearMaps move float32 tensors in bfloat16: only for moves whose result feeds nothing but
# a ranking made from bfloat16 products anyway (weight matching's unit similarities)
BFLOAT16_MOVES: ContextVar[bool] = ContextVar("BFLOAT16_MOVES", default=False)


@contextmanager
def bfloat16_moves():
    """Inside this block LinearMaps move the tensors they would move in float32 in bfloat16 instead (float32 sums
    where the BLAS has them, the result rounded to bfloat16 and returned in the tensor's dtype)."""
    token = BFLOAT16_MOVES.set(True)
    try:
        yield
    finally:
        BFLOAT16_MOVES.reset(token)


@contextmanager
def float32_moves(up_to: int = 1 << 12):
    """Inside this block LinearMaps move tensors of more than `up_to` entries in float32."""
    token = FLOAT64_UP_TO.set(up_to)
    try:
        yield
    finally:
        FLOAT64_UP_TO.reset(token)


@dataclass
class LinearMap:
    matrix: torch.Tensor  # [..., n, m]; leading dims batch over a batch axis of the tensor (e.g. heads)

    @property
    def n(self) -> int:
        return self.matrix.shape[-2]

    @property
    def m(self) -> int:
        return self.matrix.shape[-1]

    @property
    def kind(self) -> str:
        mat = self.matrix.double()
        eye = torch.eye(self.n, dtype=mat.dtype)
        if torch.allclose(mat @ mat.transpose(-1, -2), eye, atol=1e-5):
            return "orthogonal" if self.n == self.m else "rectangular-orthogonal"
        return "invertible"

    def _contra_matrix(self) -> torch.Tensor:
        # M^-T for square maps, pinv(M)^T for rectangular ones (so that M·contra^T = I on the old space).
        # Computed once, in float64: per-head maps can be badly conditioned after learning.
        key = (self.matrix.data_ptr(), self.matrix._version)
        if getattr(self, "_contra_cache", (None,))[0] != key:
            mat = self.matrix.double()
            inv = torch.linalg.inv(mat) if self.n == self.m else torch.linalg.pinv(mat)
            self._contra_cache = (key, inv.transpose(-1, -2))
        return self._contra_cache[1]

    def act(self, t: torch.Tensor, axis: int, mode: str, batch_axis: int | None = None) -> torch.Tensor:
        if mode == "copy":
            raise ValueError("'copy' mode is only defined for index maps")
        mat = self.matrix.double().abs() if mode == "gain" else (
            self.matrix.double() if mode == "co" else self._contra_matrix())
        # float64 keeps small per-head maps exact to ~1e-15; for big tensors (embeddings, LM heads) float32
        # matmul is ~10x faster and its ~1e-6 relative error is far inside the 1e-4 function tolerance
        work = torch.float64 if t.numel() <= FLOAT64_UP_TO.get() or t.dtype == torch.float64 else torch.float32
        if work == torch.float32 and BFLOAT16_MOVES.get():
            work = torch.bfloat16
        mat, t_in = mat.to(work), t
        t = t.to(work)
        axis = axis % t.ndim
        if batch_axis is None:
            if mat.ndim != 2:
                raise ValueError("a batched linear map needs a batch axis")
            out = torch.tensordot(t.movedim(axis, -1), mat.to(t.device), dims=1).movedim(-1, axis)
        else:
            mat = shared_copies(mat, t.shape[batch_axis])
            out = batched_matmul(t, mat.to(t.device), axis, batch_axis, torch.bmm)
        return out.to(t_in.dtype)

    def inverse(self) -> "LinearMap":
        if self.n != self.m:
            raise ValueError("a rectangular map has no inverse")
        return LinearMap(torch.linalg.inv(self.matrix.double()).to(self.matrix.dtype))

    def then(self, g: "LinearMap") -> "LinearMap":
        if not isinstance(g, LinearMap):
            g = LinearMap(g.matrix())
        return LinearMap((self.matrix.double() @ g.matrix.double()).to(self.matrix.dtype))

    def tensors(self) -> dict:
        return {"matrix": self.matrix}

    @classmethod
    def from_tensors(cls, d: dict) -> "LinearMap":
        return cls(d["matrix"])


@dataclass
class ScaleMap:
    """Per-coordinate non-zero scales s: "co" multiplies by s, "contra" divides by it (a diagonal map stored as
    its diagonal, so a 10⁴-unit MLP does not need a 10⁸-entry matrix)."""

    scale: torch.Tensor  # [n]

    @property
    def n(self) -> int:
        return self.scale.shape[-1]

    m = n
    kind = "diagonal"

    def act(self, t: torch.Tensor, axis: int, mode: str, batch_axis: int | None = None) -> torch.Tensor:
        scale = self.scale.abs() if mode == "gain" else self.scale
        return scaled(t.double(), scale.to(t.device), axis, "co" if mode == "gain" else mode, batch_axis).to(t.dtype)

    def inverse(self) -> "ScaleMap":
        return ScaleMap(1.0 / self.scale)

    def then(self, g: "ScaleMap") -> "ScaleMap":
        if not isinstance(g, ScaleMap):
            raise ValueError("a scale map composes only with another scale map")
        return ScaleMap(self.scale * g.scale)

    def matrix(self) -> torch.Tensor:
        return torch.diag(self.scale)

    def tensors(self) -> dict:
        return {"scale": self.scale}

    @classmethod
    def from_tensors(cls, d: dict) -> "ScaleMap":
        return cls(d["scale"])


def shared_copies(mat: torch.Tensor, size: int) -> torch.Tensor:
    """A batch of b maps for a batch axis of b·r entries: each map serves r consecutive entries."""
    b = mat.shape[0]
    if size == b:
        return mat
    if size % b:
        raise ValueError(f"{b} maps cannot act on a batch axis of {size}")
    return mat.repeat_interleave(size // b, 0)


def batched_matmul(t: torch.Tensor, mat: torch.Tensor, axis: int, batch_axis: int, matmul) -> torch.Tensor:
    """t·mat[b] along `axis`, for every index b of `batch_axis`."""
    axis, batch_axis = axis % t.ndim, batch_axis % t.ndim
    x = t.movedim((batch_axis, axis), (0, -1))  # [b, ..., n]
    lead = x.shape
    out = matmul(x.reshape(lead[0], -1, lead[-1]), mat).reshape(*lead[:-1], mat.shape[-1])
    return out.movedim((0, -1), (batch_axis, axis))


@dataclass
class DenseMap:
    """A differentiable group matrix ("co": x·M; "contra": x·M^-T, = x·M when `orthogonal`; "copy": x·M)."""

    matrix: torch.Tensor
    orthogonal: bool = True

    def act(self, t: torch.Tensor, axis: int, mode: str, batch_axis: int | None = None) -> torch.Tensor:
        m = self.matrix
        if mode == "gain":
            m = m.abs()
        elif mode == "contra" and not self.orthogonal:
            if getattr(self, "_inverse", None) is None:
                self._inverse = torch.linalg.inv(m).transpose(-1, -2)
            m = self._inverse
        if batch_axis is None:
            axis = axis % t.ndim
            if t.shape[axis] != m.shape[0]:  # a map of n entries on an axis of n·r: blocks of r, as IndexMap
                r = t.shape[axis] // m.shape[0]
                m = torch.kron(m, torch.eye(r, dtype=m.dtype, device=m.device))
            # one product with no layout ops where the axis allows (most of a learned step's maps are on 2-D
            # tensors, where the general path's movedims and reshapes cost more than the product itself)
            if axis == t.ndim - 1:
                return t @ m
            if axis == 0 and t.ndim == 2:
                return m.mT @ t
            return torch.tensordot(t.movedim(axis, -1), m, dims=1).movedim(-1, axis)
        return batched_matmul(t, shared_copies(m, t.shape[batch_axis % t.ndim]), axis, batch_axis, torch.matmul)


class _SignedGather(torch.autograd.Function):
    """x·P along axis 1 of x [a, n·r, b] (each entry of P serving r consecutive entries) for a signed permutation
    matrix P known by its indices (P[src[j], j] = sign[j]). The forward is a gather; the backward gives the
    gradient the dense product would, into x by the inverse gather and into P by one contraction, skipping the
    two n×n matmuls over the whole tensor that the dense product costs."""

    @staticmethod
    def forward(ctx, x, p, src, inv, sign, r):
        a, _, b = x.shape
        n = src.numel()
        out = x.reshape(a, n, r, b).index_select(1, src)
        if sign is not None:
            out = out * sign.to(x.dtype).view(1, n, 1, 1)
        ctx.save_for_backward(x if ctx.needs_input_grad[1] else None, inv, sign)
        ctx.r = r
        return out.view(a, n * r, b)

    @staticmethod
    def backward(ctx, g):
        x, inv, sign = ctx.saved_tensors
        a, _, b = g.shape
        n, r = inv.numel(), ctx.r
        g = g.reshape(a, n, r, b)
        grad_x = grad_p = None
        if ctx.needs_input_grad[0]:
            signed = g if sign is None else g * sign.to(g.dtype).view(1, n, 1, 1)
            grad_x = signed.index_select(1, inv).view(a, n * r, b)
        if ctx.needs_input_grad[1]:
            grad_p = _contract(x.reshape(a, n, r * b), g.reshape(a, n, r * b))
        return grad_x, grad_p, None, None, None, None


def _contract(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Σ_{a,s} x[a, i, s]·g[a, j, s]: one matmul where a layout allows it (einsum's permutes cost more than the
    product for the small tensors of a small model)."""
    if x.shape[0] == 1:
        return x[0] @ g[0].t()
    if x.shape[2] == 1:
        return x[..., 0].t() @ g[..., 0]
    return torch.einsum("ais,ajs->ij", x, g)


@dataclass
class PermutationDenseMap:
    """A differentiable (signed) permutation for learned matching: `matrix` equals a signed permutation matrix in
    value (a hard projection, with a straight-through gradient into its latent), and acts by indexing. Same
    results and gradients as DenseMap(matrix), without its dense products; orthogonal, so both modes agree."""

    matrix: torch.Tensor

    def __post_init__(self):
        hard = self.matrix.detach()
        self.src = hard.abs().argmax(0)
        self.inv = torch.argsort(self.src)
        sign = hard[self.src, torch.arange(hard.shape[1], device=hard.device)]
        self.sign = None if bool((sign == 1).all()) else sign

    def act(self, t: torch.Tensor, axis: int, mode: str, batch_axis: int | None = None) -> torch.Tensor:
        if batch_axis is not None:
            return DenseMap(self.matrix).act(t, axis, mode, batch_axis)
        axis = axis % t.ndim
        n, size = self.src.numel(), t.shape[axis]
        if size % n:
            raise ValueError(f"a permutation of {n} entries cannot act on an axis of {size}")
        x = t.reshape(math.prod(t.shape[:axis]), size, math.prod(t.shape[axis + 1:]))
        if mode == "gain" and self.sign is not None:  # |P| = P ⊙ sign(P_hard): the gradient reaches every entry
            flip = torch.ones_like(self.matrix)
            flip[self.src, torch.arange(n, device=flip.device)] = self.sign
            return _SignedGather.apply(x, (self.matrix * flip).to(t.dtype), self.src, self.inv, None,
                                       size // n).view(t.shape)
        return _SignedGather.apply(x, self.matrix.to(t.dtype), self.src, self.inv, self.sign, size // n).view(t.shape)


@dataclass
class DiagonalDenseMap:
    """Differentiable non-zero scales s (learned matching's diagonal groups): "co" multiplies by s, "contra"
    divides; elementwise, where a DenseMap of diag(s) would cost a dense product and an inverse."""

    scale: torch.Tensor

    def act(self, t: torch.Tensor, axis: int, mode: str, batch_axis: int | None = None) -> torch.Tensor:
        if mode == "gain":
            return scaled(t, self.scale.abs(), axis, "co", batch_axis)
        return scaled(t, self.scale, axis, mode, batch_axis)


def scaled(t: torch.Tensor, scale: torch.Tensor, axis: int, mode: str, batch_axis: int | None = None) -> torch.Tensor:
    """t times (mode "co") or divided by ("contra") `scale` along `axis`, in t's dtype; a scale of n entries on an
    axis of n·r serves r consecutive entries each."""
    if batch_axis is not None or mode == "copy":
        raise ValueError("a scale map acts on one unbatched axis, covariantly or contravariantly")
    axis = axis % t.ndim
    s = scale.to(t.dtype)
    if t.shape[axis] != s.numel():
        s = s.repeat_interleave(t.shape[axis] // s.numel())
    shape = [1] * t.ndim
    shape[axis] = s.numel()
    return t * s.view(shape) if mode == "co" else t / s.view(shape)
