"""Model-level operations written once against the canonical view (no family knowledge here)."""

from __future__ import annotations

import torch

from glmc.adapters import UnsupportedModel, adapter_for
from glmc.canonical import canonicalise, is_canonical
from glmc.symmetry.transform import Transform


def canonical_view(model) -> tuple[dict, "object"]:
    """(canonicalised view, adapter) of a native model; the model is not modified."""
    adapter = adapter_for(model)
    arch = adapter.arch(model)
    return canonicalise(adapter.to_canonical(model), arch.n_layer), adapter


def canonical_model(model):
    """The same function as `model`, canonicalised (LayerNorm gains 1, writers centred), as a native model."""
    view, adapter = canonical_view(model)
    return adapter.from_canonical(view, model)


def refuse_unsupported(arch, classes) -> None:
    """Raise UnsupportedModel if any of `classes` (class names, or group names like "qk" for qk.{i}) is one the
    model's adapter declared not exact for it (arch.unsupported)."""
    bad = {c: arch.unsupported[c] for c in classes if c in arch.unsupported}
    if bad:
        raise UnsupportedModel("; ".join(f"class {c!r} is not exact for this {arch.family} model: {why}"
                                         for c, why in bad.items()))


def transform_model(model, transform: Transform, canonicalise_first: bool = True):
    """A new native model: `transform` applied to `model` (canonicalised first when the transform touches the
    residual stream, which needs it)."""
    adapter = adapter_for(model)
    arch = adapter.arch(model)
    refuse_unsupported(arch, {name.split(".")[0] for name in transform.elements})
    view = adapter.to_canonical(model)
    if "residual" in transform:
        if canonicalise_first:
            view = canonicalise(view, arch.n_layer)
        elif not is_canonical(view, arch.n_layer):
            raise ValueError("a residual map needs a canonical model (LayerNorm gains 1, writers mean-centred)")
    return adapter.from_canonical(transform.apply(view, arch.n_layer), model)


@torch.no_grad()
def logits(model, inputs: torch.Tensor) -> torch.Tensor:
    out = model(inputs) if not _is_hf(model) else model(**_hf_inputs(model, inputs))
    if hasattr(out, "logits"):
        out = out.logits
    elif hasattr(out, "pooler_output"):  # HF ViTModel: the pooled output is its invariant output
        out = out.pooler_output
    return out.float()


def _is_hf(model) -> bool:
    return hasattr(model, "config") and hasattr(model.config, "model_type")


def _hf_inputs(model, inputs):
    return {"input_ids": inputs} if inputs.dtype == torch.long else {"pixel_values": inputs}


def widen_model(model, d_model: int, n_head: int | None = None, d_mlp: int | None = None,
                o: torch.Tensor | None = None):
    """`model` embedded exactly into a wider architecture of the same family (see glmc/widen.py)."""
    from glmc.widen import widen

    view, adapter = canonical_view(model)
    refuse_unsupported(adapter.arch(model), ["rectangular"])
    wide, eps = widen(view, adapter.arch(model), d_model, n_head, d_mlp, o)
    return adapter.from_canonical(wide, model, ln_eps=eps)
