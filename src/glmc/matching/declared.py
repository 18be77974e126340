"""Weight matching for groups an adapter declares beyond the Transformer's own (GroupSpec.acts: an encoder's MLM-head
hidden units and the scales of its LayerNorm output, a pooler's units), solved from their declared rows alone.

Each such group acts on one axis of a few tensors. Given everything else (the residual map, and the groups of this
kind declared before it), B's tensors are moved and compared with A's along that axis:
  a kind with a closed-form nearest element (permutations, signed permutations, orthogonal maps): the element
      maximising ⟨E, M⟩ for M = Σ_t w_t·B_tᵀ·A_t (axis last, rows stacked; w_t = 1/(‖A_t‖·‖B_t‖), so every tensor
      weighs the same, as in the residual fit); a tensor that a scale group following this one also moves (an
      untied MLM head's LayerNorm and decoder under mlm_scale) adds |cosine| of its units instead, which no per-unit
      scale or sign changes;
  diagonal scales (s on "co" tensors, 1/s on "contra" ones): per coordinate in closed form (best_complex_scale).
Kinds with neither are left at identity (still exact).
"""

from __future__ import annotations

import math

import torch

from glmc.matching.common import squared_norm
from glmc.symmetry.elements import ScaleMap
from glmc.symmetry.solvers import best_complex_scale
from glmc.symmetry.spec import instantiate
from glmc.symmetry.structure import structure
from glmc.symmetry.transform import apply_elements


def declared_roles(arch) -> list[str]:
    """The declared roles in which the matchers recognise no stream, head or unit structure
    (glmc/symmetry/structure.py): solved here."""
    return list(structure(arch.groups).own)


def match_declared(view_a: dict, view_b: dict, arch, elements: dict) -> dict:
    """{group name: element} for every declared role of no recognised structure (declared_roles), in declaration
    order, with B moved by `elements` (the residual map) and by the groups solved before."""
    roles = declared_roles(arch)
    if not roles:
        return {}
    found: dict = {}
    groups = instantiate(arch.groups, arch.n_layer, view_b.keys())
    for name, group in groups.items():
        if group.role not in roles:
            continue
        keys = list(dict.fromkeys(a.key for a in group.actions))
        moved = apply_elements({k: view_b[k] for k in keys}, {**elements, **found}, arch, strict=False)
        scaled = {a.key for g in groups.values() if g.spec.follows == group.role for a in g.actions}
        element = solve_group(group, {k: view_a[k] for k in keys}, moved, scaled)
        if element is not None:
            found[name] = element
    return found


def _rows(t: torch.Tensor, axis: int) -> torch.Tensor:
    """[rows, n]: the tensor with the group's axis last."""
    return t.double().movedim(axis, -1).reshape(-1, t.shape[axis])


def solve_group(group, view_a: dict, view_b: dict, scaled=frozenset()):
    """The element of `group` (a glmc.symmetry.spec.Group) that brings B's tensors closest to A's (module docstring;
    `scaled`: keys a following scale group moves); None where its kind has no closed form."""
    spec = group.spec
    k = spec.group()
    if spec.kind == "diagonal":
        co = [a for a in group.actions if a.mode in ("co", "gain")]
        contra = [a for a in group.actions if a.mode == "contra"]

        def stack(acts, view):
            parts = [_rows(view[a.key], a.axis).T for a in acts]
            return torch.cat(parts, -1) if parts else torch.zeros(spec.size, 1, dtype=torch.float64)

        xa, xb, ya, yb = stack(co, view_a), stack(co, view_b), stack(contra, view_a), stack(contra, view_b)
        s = best_complex_scale(xb, xa, yb, ya, xa.pow(2).sum().clamp_min(1e-30), ya.pow(2).sum().clamp_min(1e-30))
        return ScaleMap(s.float())
    try:
        m = torch.zeros(spec.size, spec.size, dtype=torch.float64)
        for a in group.actions:
            xa, xb = _rows(view_a[a.key], a.axis), _rows(view_b[a.key], a.axis)
            if a.key in scaled:
                if xa.shape[0] > 1:  # a unit's column of a single row has a cosine of ±1 with every other
                    unit = xa / xa.norm(dim=0).clamp_min(1e-30), xb / xb.norm(dim=0).clamp_min(1e-30)
                    m += (unit[1].T @ unit[0]).abs()
                continue
            weight = 1.0 / max(math.sqrt(squared_norm(xa) * squared_norm(xb)), 1e-30)
            m += weight * (xb.T @ xa)
        return k.nearest(m)
    except NotImplementedError:
        return None
