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

With these conventions orthogonal maps act identically in both modes, and composition is
`(f then g).matrix == f.matrix @ g.matrix`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MODES = ("co", "contra", "copy")


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
        pad = (self.src < 0).any()
        idx = self.src.clamp(min=0).to(t.device)
        out = t.index_select(axis, idx)
        shape = [1] * t.ndim
        shape[axis] = self.m
        if pad:
            out = out * (self.src >= 0).to(t.dtype).to(t.device).view(shape)
        if mode == "co" and self.alpha is not None:
            out = out * self.alpha.to(t.dtype).to(t.device).view(shape)
        return out

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
        mat = self.matrix.double() if mode == "co" else self._contra_matrix()
        # float64 keeps small per-head maps exact to ~1e-15; for big tensors (embeddings, LM heads) float32
        # matmul is ~10x faster and its ~1e-6 relative error is far inside the 1e-4 function tolerance
        work = torch.float64 if t.numel() <= 1 << 20 or t.dtype == torch.float64 else torch.float32
        mat, t_in = mat.to(work), t
        t = t.to(work)
        axis = axis % t.ndim
        if batch_axis is None:
            if mat.ndim != 2:
                raise ValueError("a batched linear map needs a batch axis")
            out = torch.tensordot(t.movedim(axis, -1), mat.to(t.device), dims=1).movedim(-1, axis)
        else:
            batch_axis = batch_axis % t.ndim
            x = t.movedim((batch_axis, axis), (0, -1))  # [b, ..., n]
            lead = x.shape
            x = x.reshape(lead[0], -1, lead[-1])
            out = torch.bmm(x, mat.to(t.device)).reshape(*lead[:-1], self.m).movedim((0, -1), (batch_axis, axis))
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


# --- random elements (for tests and `glmc verify`) -------------------------------------------------------


def random_permutation(n: int, gen: torch.Generator) -> IndexMap:
    return IndexMap(torch.randperm(n, generator=gen), None, n)


def random_orthogonal(n: int, gen: torch.Generator, batch: tuple = ()) -> torch.Tensor:
    a = torch.randn(*batch, n, n, generator=gen, dtype=torch.float64)
    q, r = torch.linalg.qr(a)
    # sign fix makes the distribution Haar
    return q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)


def ones_complement_basis(d: int) -> torch.Tensor:
    """Orthonormal basis U (d×(d−1)) of the hyperplane orthogonal to the all-ones vector."""
    q, _ = torch.linalg.qr(torch.cat([torch.ones(d, 1, dtype=torch.float64), torch.eye(d, dtype=torch.float64)[:, : d - 1]], 1))
    return q[:, 1:]


def ones_fixing_orthogonal(r: torch.Tensor) -> torch.Tensor:
    """O = 11ᵀ/d + U·R·Uᵀ: orthogonal, O·1 = 1 and 1ᵀ·O = 1ᵀ, so LayerNorm(x·O) = LayerNorm(x)·O."""
    d = r.shape[-1] + 1
    u = ones_complement_basis(d)
    return torch.full((d, d), 1.0 / d, dtype=torch.float64) + u @ r.double() @ u.T


def random_ones_fixing_orthogonal(d: int, gen: torch.Generator) -> LinearMap:
    return LinearMap(ones_fixing_orthogonal(random_orthogonal(d - 1, gen)))


def random_invertible(k: int, gen: torch.Generator, batch: tuple = (), cond: float = 4.0) -> LinearMap:
    """Well-conditioned random invertible maps: orthogonal · diag(singular values in [1/√cond, √cond]) · orthogonal."""
    u = random_orthogonal(k, gen, batch)
    v = random_orthogonal(k, gen, batch)
    s = torch.exp((torch.rand(*batch, k, generator=gen, dtype=torch.float64) - 0.5) * torch.log(torch.tensor(cond)))
    return LinearMap(u @ torch.diag_embed(s) @ v)


def random_semi_permutation(n: int, m: int, gen: torch.Generator) -> IndexMap:
    """Splits n units into m ≥ n copies: each old unit appears at least once; copies' alphas sum to 1."""
    if m < n:
        raise ValueError("a semi-permutation cannot shrink a layer")
    extra = torch.randint(0, n, (m - n,), generator=gen)
    src = torch.cat([torch.arange(n), extra])[torch.randperm(m, generator=gen)]
    w = torch.rand(m, generator=gen, dtype=torch.float64) + 0.1
    totals = torch.zeros(n, dtype=torch.float64).index_add_(0, src, w)
    return IndexMap(src, (w / totals[src]).float(), n)


def zero_pad(n: int, m: int) -> IndexMap:
    return IndexMap(torch.cat([torch.arange(n), torch.full((m - n,), -1)]), None, n)
