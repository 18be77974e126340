"""Random group elements of each symmetry class, for tests and `glmc verify`."""

from __future__ import annotations

import torch

from glmc.adapters.base import Arch
from glmc.symmetry.groups import (
    random_invertible,
    random_ones_fixing_orthogonal,
    random_permutation,
    random_semi_permutation,
    zero_pad,
)
from glmc.symmetry.transform import Transform


def _per_layer(arch: Arch, prefix: str, make) -> Transform:
    return Transform({f"{prefix}.{i}": make() for i in range(arch.n_layer)})


def random_class_element(cls: str, arch: Arch, gen: torch.Generator) -> Transform:
    """One random element of a symmetry class:
    orthogonal        residual map fixing the all-ones direction
    residual-perm     residual permutation (the permutation-only variant)
    heads             head permutation per layer
    qk / ov           per-head invertible maps (A on the QK side, B on the OV side)
    mlp               MLP unit permutation per layer
    mlp-split         MLP semi-permutation (ReLU only): every unit split into non-negative copies (n → 1.5·n)
    mlp-pad           zero-padding the MLP into a wider layer (n → n + n/4)
    """
    h, dh, n = arch.n_head, arch.d_head, arch.d_mlp
    makers = {
        "orthogonal": lambda: Transform({"residual": random_ones_fixing_orthogonal(arch.d_model, gen)}),
        "residual-perm": lambda: Transform({"residual": random_permutation(arch.d_model, gen)}),
        "heads": lambda: _per_layer(arch, "heads", lambda: random_permutation(h, gen)),
        "qk": lambda: _per_layer(arch, "qk", lambda: random_invertible(dh, gen, (h,))),
        "ov": lambda: _per_layer(arch, "ov", lambda: random_invertible(dh, gen, (h,))),
        "mlp": lambda: _per_layer(arch, "mlp", lambda: random_permutation(n, gen)),
        "mlp-split": lambda: _per_layer(arch, "mlp", lambda: random_semi_permutation(n, n + n // 2, gen)),
        "mlp-pad": lambda: _per_layer(arch, "mlp", lambda: zero_pad(n, n + max(1, n // 4))),
    }
    return makers[cls]()


def exact_classes(arch: Arch) -> list[str]:
    """The classes this architecture admits exactly (semi-permutations need f(αx) = αf(x), i.e. ReLU), less
    those its adapter declares unsupported (arch.unsupported, e.g. "qk" under timm's qk_norm)."""
    classes = ["orthogonal", "residual-perm", "heads", "qk", "ov", "mlp", "mlp-pad"]
    if arch.relu:
        classes.insert(classes.index("mlp-pad"), "mlp-split")
    return [c for c in classes if c not in arch.unsupported]


def random_full_transform(arch: Arch, gen: torch.Generator) -> Transform:
    """Every invertible class the model admits at once (orthogonal residual, head permutations, per-head maps,
    MLP permutations)."""
    t = Transform()
    for cls in ("orthogonal", "heads", "qk", "ov", "mlp"):
        if cls in arch.unsupported:
            continue
        t.elements.update(random_class_element(cls, arch, gen).elements)
    return t
