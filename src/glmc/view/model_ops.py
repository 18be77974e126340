"""Model-level operations written once against the canonical view (no family knowledge here)."""

from __future__ import annotations

import torch

from glmc.adapters import UnsupportedModel, adapter_for, batch_of, forward
from glmc.models.evaluate import model_device
from glmc.symmetry.random import resolve
from glmc.symmetry.spec import split_name
from glmc.symmetry.transform import Transform
from glmc.view.canonical import canonicalise, is_canonical
from glmc.view.widen import widen


def canonical_view(model) -> tuple[dict, "object"]:
    """(canonicalised view, adapter) of a native model; the model is not modified."""
    adapter = adapter_for(model)
    arch = adapter.arch(model)
    return canonicalise(adapter.to_canonical(model), arch), adapter


def canonical_model(model):
    """The same function as `model`, canonicalised (LayerNorm gains 1, writers centred), as a native model."""
    view, adapter = canonical_view(model)
    return adapter.from_canonical(view, model)


def refuse_unsupported(arch, classes) -> None:
    """Raise UnsupportedModel if any of `classes` (roles, "role:kind" classes or "rectangular") is one the
    model's adapter declared not exact for it (arch.unsupported)."""
    bad = {c: arch.unsupported[resolve(c)[0]] for c in classes if resolve(c)[0] in arch.unsupported}
    if bad:
        raise UnsupportedModel("; ".join(f"class {c!r} is not exact for this {arch.family} model: {why}"
                                         for c, why in bad.items()))


def transform_model(model, transform: Transform, canonicalise_first: bool = True):
    """A new native model: `transform` applied to `model` (canonicalised first when the transform touches the
    residual stream, which needs it)."""
    adapter = adapter_for(model)
    arch = adapter.arch(model)
    roles = {split_name(name)[0] for name in transform.elements}
    refuse_unsupported(arch, roles)
    view = adapter.to_canonical(model)
    if "residual" in roles:
        if canonicalise_first:
            view = canonicalise(view, arch)
        elif not is_canonical(view, arch):
            raise ValueError("a residual map needs a canonical model (norm gains 1, LayerNorm writers mean-centred)")
    return adapter.from_canonical(transform.apply(view, arch), model)


@torch.no_grad()
def logits(model, inputs) -> torch.Tensor:
    """float32 logits of `model` on a glmc.data batch dict, or on a bare input tensor (what
    verify.probe_inputs returns), moved to the model's device."""
    batch = inputs if isinstance(inputs, dict) else batch_of(adapter_for(model, check=False), inputs)
    device = model_device(model)
    return forward(model, {k: v.to(device) for k, v in batch.items()}).float()


def widen_model(model, d_model: int, n_head: int | None = None, d_mlp: int | None = None,
                o: torch.Tensor | None = None, d_head: int | None = None):
    """`model` embedded exactly into a wider architecture of the same family (see glmc/view/widen.py)."""
    view, adapter = canonical_view(model)
    refuse_unsupported(adapter.arch(model), ["rectangular"])
    wide, eps = widen(view, adapter.arch(model), d_model, n_head, d_mlp, o, d_head)
    return adapter.from_canonical(wide, model, ln_eps=eps)
