"""Group kinds: what a symmetry group *is*, as opposed to where it acts (glmc/symmetry/spec.py).

An adapter declares, per role (residual, heads, qk, ov, mlp, …), one kind by name, a size and, where the kind
takes them, parameters (GroupSpec.params: e.g. the rotary dimensions of a partially rotary head). Every algorithm
that needs to know the group asks the kind, never a group's or a kind's name:

  random(n, batch, gen)      a random element (tests, `glmc verify`)
  identity(n, batch)         the neutral element
  nearest(m)                 the element E maximising ⟨E, M⟩ for a cross-correlation M whose rows index the
                             old coordinates and columns the new ones (x ↦ x·E): weight and activation matching
  nearest_per_sign(m)        the same for each of a kind's discrete global signs (±P: two elements), else [nearest]
  head_similarity(xa, ya, xb, yb)   [H_a, H_b]: how alike two heads' circuits X_hᵀ·Y_h are, blind to this kind's
                             maps (weight matching's head assignment; glmc/symmetry/solvers.py)
  head_problem(xa, xb, ya, yb) / solve_head_problems(problems)   per-head maps C of this kind with C·X_B ≈ X_A and
                             C^-T·Y_B ≈ Y_A (column action, [H, k, k]); a kind whose fit is an iterative solve
                             batches every layer's problems into one
  latent(e) / project(z)     learned matching's parameters, started at element e, and their (differentiable)
                             projection onto the group as a dense matrix (`hard`: the exact element's matrix)
  differentiable(z)          the projection as an element that acts on tensors (learned matching's forward and
                             backward): a DenseMap of `project`, or a structured form with the same values and
                             gradients (indexing for permutations, elementwise scales for diagonals)
  element(dense)             the exact element a hard projection stands for
  embed(n, m)                residual kinds only: the exact rectangular map of an N-wide stream into an M-wide
                             one that widening uses (its readers' and writers' side of the same group)

A kind is registered by name with `@register_kind` on its class; every module of this package is imported when
the package is, so a new kind is a new module here and nothing else changes. `kind(name, **params)` gives the
kind bound to its parameters; `KINDS` holds each kind with its default parameters.
"""

from __future__ import annotations

import importlib
import pkgutil

from glmc.symmetry.kinds.base import (
    KIND_CLASSES,
    KINDS,
    Kind,
    assignment_src,
    dense,
    kind,
    log_uniform_scales,
    ones_complement_basis,
    random_orthogonal,
    register_kind,
)

# the built-in kinds, importable from here as before
from glmc.symmetry.kinds.linear import Diagonal, Invertible
from glmc.symmetry.kinds.orthogonal import Orthogonal, OrthogonalFixingOnes, SignedPermutation
from glmc.symmetry.kinds.permutation import GroupedPermutation, Permutation, SemiPermutation, ZeroPad, zero_pad
from glmc.symmetry.kinds.rotary import PartialRotary, ScaleRotation

# every other module of the package registers its kinds when imported (a new kind is a new module here)
for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")

__all__ = ["Kind", "KINDS", "KIND_CLASSES", "kind", "register_kind", "Permutation", "GroupedPermutation",
           "SemiPermutation", "ZeroPad", "zero_pad", "Orthogonal", "OrthogonalFixingOnes", "SignedPermutation",
           "Invertible", "Diagonal", "ScaleRotation", "PartialRotary", "random_orthogonal", "ones_complement_basis",
           "assignment_src", "dense", "log_uniform_scales"]
