"""Pieces every alignment method shares: canonical pair in, checked aligned model out."""

from __future__ import annotations

import torch

from glmc.adapters import adapter_for
from glmc.canonical import canonicalise
from glmc.symmetry.spec import NORM_BIASES, READERS, WRITERS, expand_keys
from glmc.symmetry.transform import Transform

RESIDUAL_KEYS = WRITERS + NORM_BIASES + READERS


def check_compatible(model_a, model_b):
    """(adapter, arch) shared by both models; refuses pairs of different families or shapes."""
    adapter = adapter_for(model_a)
    if adapter_for(model_b).family != adapter.family:
        raise ValueError(f"cannot align a {adapter.family} model with a {adapter_for(model_b).family} model")
    arch_a, arch_b = adapter.arch(model_a), adapter.arch(model_b)
    shape = ("n_layer", "d_model", "n_head", "d_mlp")
    if any(getattr(arch_a, k) != getattr(arch_b, k) for k in shape):
        raise ValueError("models differ in shape "
                         f"({', '.join(f'{k} {getattr(arch_a, k)} vs {getattr(arch_b, k)}' for k in shape)}); "
                         "embed the narrower one first (glmc align NARROW WIDE)")
    return adapter, arch_a


def canonical_pair(model_a, model_b):
    """(adapter, arch, canonical view of A, canonical view of B); refuses pairs of different architectures."""
    adapter, arch = check_compatible(model_a, model_b)
    return adapter, arch, canonical_cpu_view(adapter, model_a), canonical_cpu_view(adapter, model_b)


def canonical_cpu_view(adapter, model) -> dict:
    """The model's canonical view, canonicalised, as float32 CPU tensors detached from the model."""
    return canonicalise(_to_cpu(adapter.to_canonical(model)), adapter.arch(model).n_layer)


def _to_cpu(view):
    return {k: v.detach().float().cpu() for k, v in view.items()}


def residual_keys(view, n_layer: int) -> list[str]:
    return expand_keys(RESIDUAL_KEYS, n_layer, view)


def view_distance(view_a: dict, view_b: dict) -> float:
    """Σ‖A − B‖² / Σ‖A‖² over every tensor: 0 when B's weights coincide with A's."""
    num = sum(float((view_a[k].double() - view_b[k].double()).pow(2).sum()) for k in view_a)
    den = sum(float(view_a[k].double().pow(2).sum()) for k in view_a)
    return num / den


@torch.no_grad()
def max_logit_change(model, other, n: int = 2) -> float:
    from glmc.model_ops import logits
    from glmc.verify import probe_inputs

    x = probe_inputs(model, n=n).to(next(model.parameters()).device)
    return float((logits(model, x) - logits(other, x)).abs().max())


def finish(model_a, model_b, adapter, arch, view_a, view_b, transform: Transform, report: dict, tol: float = 1e-3,
           probes: dict | None = None, fill_target: dict | None = None):
    """Build canonical A and B′ = π(B) as native models on the inputs' devices; check B′ has B's function before
    anything is returned (max |Δlogits| in the report; an error if over `tol`). With `probes` (an embedded
    narrower B, glmc/align/nullspace.py), B′'s free reader weights are then filled with A's."""
    from glmc.align import Alignment
    from glmc.align.nullspace import fill_exact

    dev_a, dev_b = next(model_a.parameters()).device, next(model_b.parameters()).device
    canon_a = adapter.from_canonical(view_a, model_a.cpu()).to(dev_a)
    model_a.to(dev_a)
    moved = transform.apply(view_b, arch.n_layer)
    filled = None
    if probes is not None:
        plain = moved
        moved, filled = fill_exact(view_a if fill_target is None else fill_target, plain, probes, transform,
                                   arch.n_layer)
        report["null_space_fill"] = {"tensors": len(filled), "distance_without": view_distance(view_a, plain)}
    b_aligned = adapter.from_canonical(moved, model_b.cpu()).to(dev_b)
    model_b.to(dev_b)
    report["max_dlogits_b"] = max_logit_change(model_b, b_aligned)
    report["max_dlogits_a"] = max_logit_change(model_a, canon_a)
    report["distance_before"] = view_distance(view_a, view_b)
    report["distance_after"] = view_distance(view_a, moved)
    worst = max(report["max_dlogits_a"], report["max_dlogits_b"])
    if worst > tol:
        raise RuntimeError(f"alignment changed the function: max |Δlogits| {worst:.3g} > {tol:g} (a bug: please "
                           "report it with the models' configs)")
    return Alignment(canon_a, b_aligned, transform, report, fill=filled)
