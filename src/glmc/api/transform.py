"""`glmc.Transform`: a symmetry transform with the group declarations it was fitted under.

A transform holds one group element per symmetry group of a model (residual map, head and unit permutations,
per-head maps, …; glmc/symmetry). Applying it to a model returns a new model that computes exactly the same
function; the input is left untouched.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

from glmc.adapters import adapter_for
from glmc.errors import BadCheckpoint, IncompatibleModels
from glmc.symmetry.spec import GroupSpec, split_name
from glmc.symmetry.transform import Transform as _Elements
from glmc.view.model_ops import transform_model

GROUPS_KEY = "glmc_groups"


class Transform:
    """A symmetry transform of one model architecture.

    Attributes:
        elements: group name ("residual", "heads.3", "qk.0", …) -> group element (glmc/symmetry/elements.py).
        groups: role -> GroupSpec, the declarations of the architecture it acts on (None if unknown, e.g. a
            transform file written before glmc stored them: `load(path, model=…)` supplies them).
    """

    def __init__(self, elements: _Elements | dict | None = None, groups: dict | None = None):
        self._t = elements if isinstance(elements, _Elements) else _Elements(dict(elements or {}))
        self.groups = dict(groups) if groups is not None else None

    @classmethod
    def identity(cls, model) -> "Transform":
        """The transform that changes nothing, for `model`'s architecture."""
        return cls({}, _groups_of(model))

    @property
    def elements(self) -> dict:
        """Group name ("residual", "heads.3", "qk.0", …) -> group element (an IndexMap, LinearMap or ScaleMap of
        glmc/symmetry/elements.py; a residual LinearMap's `.matrix` is the [d_model, d_model] map x ↦ x·O)."""
        return self._t.elements

    def describe(self) -> dict[str, str]:
        """Group name -> kind of its element (e.g. {"residual": "orthogonal", "heads.0": "permutation"})."""
        return self._t.describe()

    def __repr__(self) -> str:
        roles = sorted({split_name(n)[0] for n in self.elements})
        return f"glmc.Transform({len(self.elements)} group elements: {', '.join(roles) or 'identity'})"

    def apply(self, model):
        """A new native model: this transform applied to `model` (canonicalised first, which keeps its function).

        Raises IncompatibleModels if the model is not of the architecture the transform was fitted on."""
        own = _groups_of(model)
        if self.groups is not None and own != self.groups:
            raise IncompatibleModels("this transform was fitted on another architecture (its symmetry groups differ "
                                     "from the model's); apply it to a model of the same shape")
        try:
            return transform_model(model, self._t)
        except (RuntimeError, IndexError) as e:
            raise IncompatibleModels(f"the transform does not fit this model ({e}); apply it to a model of the shape "
                                     "it was fitted on") from None

    def inverse(self) -> "Transform":
        """The transform that undoes this one: t.inverse().apply(t.apply(m)) computes m's function, with m's
        weights up to canonicalisation."""
        return Transform(self._t.inverse(self._arch()), self.groups)

    def then(self, other: "Transform") -> "Transform":
        """The transform that applies this one, then `other`."""
        return Transform(self._t.then(other._t, self._arch(other)), self.groups or other.groups)

    def compose(self, other: "Transform") -> "Transform":
        """self ∘ other: the transform that applies `other` first, then this one (t.compose(u).apply(m) ==
        t.apply(u.apply(m)))."""
        return other.then(self)

    def save(self, path) -> Path:
        """Write the transform to a safetensors file (atomically), with its group declarations."""
        meta = None if self.groups is None else {GROUPS_KEY: json.dumps({r: asdict(g) for r, g in self.groups.items()})}
        self._t.save(path, metadata=meta)
        return Path(path)

    @classmethod
    def load(cls, path, model=None) -> "Transform":
        """Read a transform file written by `save` (or by `glmc align` / `glmc merge`). `model`: a model of the
        architecture it acts on, which supplies the declarations when the file has none."""
        from safetensors import safe_open

        try:
            with safe_open(str(path), "pt") as f:
                meta = f.metadata() or {}
            elements = _Elements.load(path)
        except Exception as e:  # safetensors raises its own error type for a corrupt header
            raise BadCheckpoint(f"{path} is not a readable glmc transform file ({e})") from None
        groups = None
        if GROUPS_KEY in meta:
            groups = {r: _spec(g) for r, g in json.loads(meta[GROUPS_KEY]).items()}
        elif model is not None:
            groups = _groups_of(model)
        return cls(elements, groups)

    def _arch(self, other: "Transform | None" = None):
        groups = self.groups or (other.groups if other is not None else None)
        if groups is None:
            raise ValueError("this transform has no group declarations; load it with Transform.load(path, model=m)")
        return SimpleNamespace(groups=groups)


def _spec(fields: dict) -> GroupSpec:
    """A GroupSpec from its JSON form (tuples come back as lists)."""
    values: dict = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    return GroupSpec(**values)


def _groups_of(model) -> dict:
    return dict(adapter_for(model).arch(model).groups)
