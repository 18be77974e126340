"""A Transform: one group element per symmetry group of a model, and the one interpreter of the spec.

`apply_elements` is the only code that applies group elements to a canonical view: exact elements (IndexMap,
LinearMap, ScaleMap) for transforms, differentiable ones (DenseMap and its structured forms) for learned
matching. Which groups exist, in which order they apply and which batch axes follow which permutation all come
from the model's declarations (`arch.groups`, glmc/symmetry/spec.py); nothing here depends on a group's name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import torch
from safetensors.torch import load_file, save_file

from glmc.io import atomic_path
from glmc.symmetry.elements import DenseMap, DiagonalDenseMap, IndexMap, LinearMap, PermutationDenseMap, ScaleMap
from glmc.symmetry.spec import group_name, instantiate, split_name

Element = IndexMap | LinearMap | ScaleMap | DenseMap | PermutationDenseMap | DiagonalDenseMap
ELEMENT_TYPES = {c.__name__: c for c in (IndexMap, LinearMap, ScaleMap)}


def apply_elements(view: dict[str, torch.Tensor], elements: dict, arch, strict: bool = True) -> dict:
    """π(view) for group elements keyed by group name; a new view (the input is not modified). `strict`: a group
    that acts on no tensor of `view` is an error (not for partial views such as null-space probes)."""
    groups = instantiate(arch.groups, arch.n_layer, view.keys())
    unknown = sorted(set(elements) - set(groups))
    if unknown and strict:
        raise ValueError(f"group {unknown[0]!r} acts on no tensor of this {arch.family} model (its groups: "
                         f"{', '.join(sorted({g.role for g in groups.values()}))})")
    out = dict(view)
    for name, group in groups.items():
        if name in elements:
            g = elements[name]
            for a in group.actions:
                out[a.key] = g.act(out[a.key], a.axis, a.mode, a.batch_axis)
    return out


def constant_first(view: dict[str, torch.Tensor], constant, arch) -> set[str]:
    """The groups of `constant` that may act before all others with the same result: each shares no tensor axis
    (batch axes included) with any group that stays in place and would act before it. Learned matching applies
    these once, not every step."""
    def axes(a):
        nd = view[a.key].dim()
        return {x % nd for x in (a.axis, a.batch_axis) if x is not None}

    constant, touched, out = set(constant), {}, set()
    for name, group in instantiate(arch.groups, arch.n_layer, view.keys()).items():
        if name in constant and all(not axes(a) & touched.get(a.key, set()) for a in group.actions):
            out.add(name)
            continue
        for a in group.actions:
            touched.setdefault(a.key, set()).update(axes(a))
    return out


def _following(name: str, elements: dict, arch):
    """The permutation that reorders group `name`'s batch axis, if the declaration says it has one."""
    role, layer = split_name(name)
    spec = arch.groups.get(role)
    if spec is None or spec.follows is None:
        return None
    return elements.get(group_name(spec.follows, layer))


def _follows(name: str, arch) -> bool:
    spec = arch.groups.get(split_name(name)[0])
    return spec is not None and spec.follows is not None


def _moved(g, src: torch.Tensor):
    """A batched map (LinearMap) or per-unit scale (ScaleMap) whose entry j becomes entry src[j]."""
    return ScaleMap(g.scale[src]) if isinstance(g, ScaleMap) else LinearMap(g.matrix[src])


def _composed(blocks: IndexMap | None, e: IndexMap | None, size: int | None = None) -> torch.Tensor:
    """src of the block permutation `blocks` (expanded to the axis), then `e`, on an axis of `size` entries."""
    size = size or e.n
    src = torch.arange(size) if blocks is None else blocks._shared(size)[0]
    return src if e is None else src[e.src]


def _refactor(total: IndexMap, blocks: IndexMap) -> IndexMap:
    """The e with (blocks, then e) == total: what is left of a permutation once its block order is taken out."""
    return IndexMap(torch.argsort(blocks._shared(total.n)[0])[total.src], None, total.n)


@dataclass
class Transform:
    elements: dict[str, Element] = field(default_factory=dict)

    def __getitem__(self, name):
        return self.elements[name]

    def __contains__(self, name):
        return name in self.elements

    def groups(self):
        """Group names, by role then layer (the order they apply in for a standard declaration)."""
        return sorted(self.elements, key=lambda n: (split_name(n)[0], split_name(n)[1] or -1))

    def apply(self, view: dict[str, torch.Tensor], arch) -> dict[str, torch.Tensor]:
        """Returns a new view; the input view is not modified."""
        return apply_elements(view, self.elements, arch)

    def inverse(self, arch) -> "Transform":
        """Inverse of the whole transform (undoes apply)."""
        inv = {}
        for name, g in self.elements.items():
            perm = _following(name, self.elements, arch)
            if isinstance(g, IndexMap) and perm is not None:
                inv[name] = _refactor(IndexMap(torch.argsort(_composed(perm, g)), None, g.n), perm.inverse())
            elif perm is not None:
                # apply order is permutation, then per-head maps, so the inverse maps per-head first: the map
                # undoing position j's map must then be moved by the inverse permutation
                inv[name] = _moved(g.inverse(), torch.argsort(perm.src))
            else:
                inv[name] = g.inverse()
        return Transform(inv)

    def then(self, other: "Transform", arch) -> "Transform":
        """The transform that applies self, then other."""
        out = dict(self.elements)
        for name, g2 in other.elements.items():
            perm2 = _following(name, other.elements, arch)
            g1 = out.get(name)
            if isinstance(g2, IndexMap) and _follows(name, arch):
                continue  # permutations inside a followed one's blocks: below, once every block order is known
            if g1 is not None and perm2 is not None:
                out[name] = (LinearMap(g1.matrix[perm2.src].double() @ g2.matrix.double())
                             if isinstance(g1, LinearMap) else _moved(g1, perm2.src).then(g2))
            else:
                out[name] = g2 if g1 is None else g1.then(g2)
        # batched maps of self whose permutation other moves, where other has no map of its own: move them
        for name in list(out):
            perm2 = _following(name, other.elements, arch)
            if name not in other.elements and perm2 is not None and not isinstance(out[name], IndexMap):
                out[name] = _moved(out[name], perm2.src)
        # permutations that follow another one (query heads inside key/value groups): compose the whole
        # permutations of the axis, then split off the composed block order
        for name in set(self.elements) | set(other.elements):
            e1, e2 = self.elements.get(name), other.elements.get(name)
            if not (isinstance(e1 or e2, IndexMap) and _follows(name, arch)):
                continue
            f1, f2 = _following(name, self.elements, arch), _following(name, other.elements, arch)
            size = (e1 or e2).n
            total = _composed(f1, e1, size)[_composed(f2, e2, size)]
            blocks = f1 if f2 is None else f2 if f1 is None else f1.then(f2)
            out[name] = (IndexMap(total, None, size) if blocks is None
                         else _refactor(IndexMap(total, None, size), blocks))
        return Transform(out)

    def describe(self) -> dict[str, str]:
        return {n: self.elements[n].kind for n in self.groups()}

    # --- safetensors round trip --------------------------------------------------------------------------
    def save(self, path, metadata: dict | None = None) -> None:
        tensors, kinds = {}, {}
        for name, g in self.elements.items():
            kinds[name] = type(g).__name__
            for k, v in g.tensors().items():
                tensors[f"{name}/{k}"] = v.contiguous()
        with atomic_path(path) as tmp:
            save_file(tensors, str(tmp), metadata={**(metadata or {}), "glmc_transform": json.dumps(kinds)})

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
            elements[name] = ELEMENT_TYPES[kind].from_tensors(d)
        return cls(elements)
