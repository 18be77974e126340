"""Alignment methods: bring model B next to model A by a symmetry transform.

Every method returns an `Alignment`: the two endpoints to interpolate (A as used, B′ = π(B)), the transform
(None for `none`) and a report dict. For every method but `none`, both endpoints are canonical (LayerNorm
gains folded, writers centred; same function as the inputs), since the residual symmetries live there.
`none` is the paper's vanilla averaging: the raw checkpoints.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from glmc.symmetry.transform import Transform

# method name -> module under glmc.align defining `align(model_a, model_b, **options) -> Alignment`
METHODS = {
    "none": None,
    "weight": "weight",
    "activation": "activation",
    "learned": "learned",
    "learned-perm": "learned",
}


@dataclass
class Alignment:
    model_a: object
    model_b: object
    transform: Transform | None
    report: dict = field(default_factory=dict)


def available_methods() -> list[str]:
    out = []
    for name, module in METHODS.items():
        if module is None or importlib.util.find_spec(f"glmc.align.{module}") is not None:
            out.append(name)
    return out


def align(model_a, model_b, method: str = "weight", **options) -> Alignment:
    if method not in METHODS:
        raise ValueError(f"unknown alignment method {method!r}; choose from {', '.join(METHODS)}")
    if METHODS[method] is None:
        return Alignment(model_a, model_b, None, {"method": "none"})
    if method not in available_methods():
        raise ValueError(f"alignment method {method!r} is not implemented yet")
    module = importlib.import_module(f"glmc.align.{METHODS[method]}")
    if method == "learned-perm":
        options["permutations_only"] = True
    return module.align(model_a, model_b, **options)
