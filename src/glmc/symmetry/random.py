"""Random group elements of each symmetry class a model declares, for tests and `glmc verify`.

A class is a role ("residual", "heads", "qk", "ov", "mlp", …: its declared kind), or "role:kind" for one of the
role's declared subgroups or extensions ("residual:permutation", "mlp:semi-permutation", "mlp:zero-pad").
"""

from __future__ import annotations

import torch

from glmc.errors import BadOption, UnsupportedModel
from glmc.symmetry.spec import group_name
from glmc.symmetry.transform import Transform

# the names earlier glmc versions used (and `glmc verify --classes` still accepts)
ALIASES = {"orthogonal": "residual", "residual-perm": "residual:permutation", "mlp-split": "mlp:semi-permutation",
           "mlp-pad": "mlp:zero-pad"}


def resolve(cls: str) -> tuple[str, str | None]:
    """(role, kind or None for the declared one) of a class name."""
    role, _, k = ALIASES.get(cls, cls).partition(":")
    return role, k or None


def class_name(role: str, k: str | None = None) -> str:
    return role if k is None else f"{role}:{k}"


def exact_classes(arch) -> list[str]:
    """Every class the model declares: each role's group, then its subgroups and extensions."""
    out = []
    for role, spec in arch.groups.items():
        out.append(role)
        out += [class_name(role, k) for k in spec.subgroups + spec.extensions]
    return out


def random_class_element(cls: str, arch, gen: torch.Generator) -> Transform:
    """One random element of a class (every layer's group for per-layer roles)."""
    role, k = resolve(cls)
    if role in arch.unsupported:
        raise UnsupportedModel(f"class {cls!r} is not exact for this {arch.family} model: {arch.unsupported[role]}")
    if role not in arch.groups:
        raise BadOption(f"class {cls!r}: this {arch.family} model declares no {role!r} group "
                         f"(its classes: {', '.join(exact_classes(arch))})")
    spec = arch.groups[role]
    if k is not None and k not in spec.subgroups + spec.extensions:
        raise BadOption(f"class {cls!r}: the {role} group of this {arch.family} model is {spec.kind}, with "
                         f"subgroups/extensions {list(spec.subgroups + spec.extensions)}")
    maker = spec.group(k)
    layers = range(arch.n_layer) if spec.per_layer else [None]
    return Transform({group_name(role, i): maker.random(spec.size, spec.batch, gen) for i in layers})


def random_full_transform(arch, gen: torch.Generator) -> Transform:
    """A random element of every declared group at once (each role's own kind)."""
    t = Transform()
    for role in arch.groups:
        t.elements.update(random_class_element(role, arch, gen).elements)
    return t
