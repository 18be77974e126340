"""A Transform: one group element per symmetry group of a model, applied to a canonical view via the spec."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import torch
from safetensors.torch import load_file, save_file

from glmc.io import atomic_path
from glmc.symmetry.groups import IndexMap, LinearMap
from glmc.symmetry.spec import actions, group_rank

Element = IndexMap | LinearMap


@dataclass
class Transform:
    elements: dict[str, Element] = field(default_factory=dict)

    def __getitem__(self, name):
        return self.elements[name]

    def __contains__(self, name):
        return name in self.elements

    def groups(self):
        return sorted(self.elements, key=group_rank)

    def apply(self, view: dict[str, torch.Tensor], n_layer: int) -> dict[str, torch.Tensor]:
        """Returns a new view; the input view is not modified."""
        out = dict(view)
        acts = actions(n_layer, view.keys())
        for name in self.groups():
            if name not in acts:
                raise KeyError(f"no tensor of this model is acted on by group {name!r}")
            g = self.elements[name]
            for a in acts[name]:
                out[a.key] = g.act(out[a.key], a.axis, a.mode, a.batch_axis)
        return out

    def inverse(self) -> "Transform":
        """Inverse of the whole transform (undoes apply)."""
        inv = {}
        for name, g in self.elements.items():
            if name.startswith(("qk.", "ov.")):
                heads = self.elements.get("heads." + name.split(".")[1])
                # apply order is heads then per-head maps, so the inverse maps per-head first: the map undoing
                # position j's A must then be moved by the inverse permutation
                m = g.inverse().matrix
                inv[name] = LinearMap(m[torch.argsort(heads.src)] if heads is not None else m)
            else:
                inv[name] = g.inverse()
        return Transform(inv)

    def then(self, other: "Transform") -> "Transform":
        """The transform that applies self, then other."""
        out = dict(self.elements)
        for name, g2 in other.elements.items():
            if name.startswith(("qk.", "ov.")):
                heads2 = other.elements.get("heads." + name.split(".")[1])
                g1 = out.get(name)
                if g1 is not None:
                    m1 = g1.matrix[heads2.src] if heads2 is not None else g1.matrix
                    out[name] = LinearMap(m1.double() @ g2.matrix.double())
                else:
                    out[name] = g2
            elif name in out:
                out[name] = out[name].then(g2)
            else:
                out[name] = g2
        # per-head maps of self on layers where other permutes heads but has no per-head map: move them
        for name in list(out):
            if name.startswith(("qk.", "ov.")) and name not in other.elements:
                heads2 = other.elements.get("heads." + name.split(".")[1])
                if heads2 is not None:
                    out[name] = LinearMap(out[name].matrix[heads2.src])
        return Transform(out)

    def describe(self) -> dict[str, str]:
        return {n: self.elements[n].kind for n in self.groups()}

    # --- safetensors round trip --------------------------------------------------------------------------
    def save(self, path) -> None:
        tensors, kinds = {}, {}
        for name, g in self.elements.items():
            kinds[name] = type(g).__name__
            for k, v in g.tensors().items():
                tensors[f"{name}/{k}"] = v.contiguous()
        with atomic_path(path) as tmp:
            save_file(tensors, str(tmp), metadata={"glmc_transform": json.dumps(kinds)})

    @classmethod
    def load(cls, path) -> "Transform":
        from safetensors import safe_open

        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
        if "glmc_transform" not in meta:
            raise ValueError(f"{path} is not a glmc transform file (no 'glmc_transform' metadata)")
        kinds = json.loads(meta["glmc_transform"])
        flat = load_file(str(path))
        elements = {}
        for name, kind in kinds.items():
            d = {k.split("/", 1)[1]: v for k, v in flat.items() if k.split("/", 1)[0] == name}
            elements[name] = {"IndexMap": IndexMap, "LinearMap": LinearMap}[kind].from_tensors(d)
        return cls(elements)
