"""The Kind interface every group kind implements (the package docstring lists its methods), the registry kinds
are known by (`register_kind`, `kind`), and the helpers several kinds share. The kinds themselves live in the
other modules of this package, which import this one; the package imports them all."""

from __future__ import annotations

import math

import torch

from glmc.symmetry.elements import DenseMap, IndexMap
from glmc.symmetry.solvers import circuit_similarity


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
    from scipy.optimize import linear_sum_assignment  # scipy.optimize: 0.25 s to import, needed here only

    rows, cols = linear_sum_assignment(m.detach().cpu().double().numpy(), maximize=True)
    src = torch.empty(m.shape[1], dtype=torch.long)
    src[torch.as_tensor(cols)] = torch.as_tensor(rows)
    return src


def log_uniform_scales(shape, gen, spread: float = 4.0) -> torch.Tensor:
    """Random positive scales, log-uniform in [1/√spread, √spread] (well-conditioned random elements)."""
    return torch.exp((torch.rand(shape, generator=gen, dtype=torch.float64) - 0.5) * math.log(spread))


class Kind:
    name = ""
    invertible = True
    orthogonal = True  # the contravariant action equals the covariant one
    discrete = False  # learned through a straight-through hard projection (a one-hot latent)
    contains: tuple = ()  # kinds that are subgroups of this one

    def __init__(self, **params):
        unknown = set(params) - set(self.parameters())
        if unknown:
            raise ValueError(f"group kind {self.name!r} takes no parameter {sorted(unknown)[0]!r}")
        self.params = params

    @classmethod
    def parameters(cls) -> tuple:
        """The parameter names this kind takes (GroupSpec.params)."""
        return ()

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

    def nearest_per_sign(self, m) -> list:
        """For a kind with a discrete global sign (±P), the element nearest to M for each sign; for the others
        [nearest(m)]. Moments rarely decide such a sign well (docs/encoders.md), so the caller chooses."""
        return [self.nearest(m)]

    # --- per-head maps (weight matching) --------------------------------------------------------------------

    def head_similarity(self, x_a, y_a, x_b, y_b) -> torch.Tensor:
        """S[h, j]: the heads' whole circuits ⟨X_a,hᵀ·Y_a,h, X_b,jᵀ·Y_b,j⟩ (invariant under any map of the head
        dimensions that acts as C on X and C^-T on Y)."""
        return circuit_similarity(x_a, y_a, x_b, y_b)

    def fit_head_maps(self, xa, xb, ya, yb) -> torch.Tensor:
        """Per-head maps C [H, k, k] (column action) with C·X_B ≈ X_A and C^-T·Y_B ≈ Y_A."""
        self._missing("per-head least-squares fit")

    def head_problem(self, xa, xb, ya, yb):
        """What `solve_head_problems` needs of one layer's heads (by default: the fitted maps themselves)."""
        return self.fit_head_maps(xa, xb, ya, yb)

    def solve_head_problems(self, problems: list) -> list:
        """The maps [H, k, k] of every problem, in order (a kind with an iterative solver batches them)."""
        return list(problems)

    # --- learned matching -----------------------------------------------------------------------------------

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


KIND_CLASSES: dict[str, type[Kind]] = {}
KINDS: dict[str, Kind] = {}  # name -> the kind with its default parameters
_BOUND: dict = {}


def register_kind(cls: type[Kind]) -> type[Kind]:
    """Class decorator: make a kind known by its `name`."""
    if cls.name in KIND_CLASSES and KIND_CLASSES[cls.name] is not cls:
        raise ValueError(f"group kind {cls.name!r} is registered twice")
    KIND_CLASSES[cls.name] = cls
    KINDS[cls.name] = cls()
    return cls


def kind(name: str, **params) -> Kind:
    """The kind `name`, bound to `params` (its declared parameters; none: the defaults)."""
    if name not in KINDS:
        raise ValueError(f"unknown group kind {name!r}; known: {', '.join(KINDS)}")
    if not params:
        return KINDS[name]
    key = (name, tuple(sorted(params.items())))
    if key not in _BOUND:
        _BOUND[key] = KIND_CLASSES[name](**params)
    return _BOUND[key]


def dense(e) -> torch.Tensor:
    return e.matrix() if isinstance(e, IndexMap) else e.matrix

