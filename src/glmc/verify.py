"""Function-preservation checks: the core invariant that a symmetry transform never changes the function."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from glmc.adapters import adapter_for
from glmc.model_ops import canonical_model, logits, refuse_unsupported, transform_model, widen_model
from glmc.widen import random_mean_preserving_embedding
from glmc.symmetry.random import exact_classes, random_class_element, random_full_transform


@dataclass
class Check:
    name: str
    max_dlogits: float
    dloss: float
    seconds: float
    ok: bool


def probe_inputs(model, n: int = 2, seq: int = 32, gen: torch.Generator | None = None) -> torch.Tensor:
    """Random inputs a model accepts: token ids for LMs, pixels for image models."""
    gen = gen or torch.Generator().manual_seed(0)
    arch = adapter_for(model).arch(model)
    if arch.task == "lm":
        vocab = model.config.vocab_size
        seq = min(seq, model.config.n_positions)
        return torch.randint(0, vocab, (n, seq), generator=gen)
    c, size = image_shape(model)
    return torch.randn(n, c, size, size, generator=gen)


def image_shape(model) -> tuple[int, int]:
    cfg = getattr(model, "config", None)
    if cfg is not None and hasattr(cfg, "image_size"):
        return cfg.num_channels, cfg.image_size
    pe = model.patch_embed  # timm
    return pe.proj.in_channels, pe.img_size[0]


def compare(ref_logits: torch.Tensor, model, inputs: torch.Tensor, task: str) -> tuple[float, float]:
    """(max |Δlogits|, |Δloss|) of `model` against reference logits; the loss uses random targets for
    classifiers and next tokens for LMs."""
    out = logits(model, inputs)
    if out.shape != ref_logits.shape:
        raise ValueError(f"output shape changed: {tuple(ref_logits.shape)} -> {tuple(out.shape)}")
    return float((out - ref_logits).abs().max()), abs(_loss(out, inputs, task) - _loss(ref_logits, inputs, task))


def _loss(out: torch.Tensor, inputs: torch.Tensor, task: str) -> float:
    if task == "lm":
        return float(F.cross_entropy(out[:, :-1].reshape(-1, out.shape[-1]), inputs[:, 1:].reshape(-1)))
    targets = torch.arange(out.shape[0]) % out.shape[-1]
    return float(F.cross_entropy(out, targets))


def verify_model(model, seed: int = 0, tol: float = 1e-4, classes: list[str] | None = None) -> list[Check]:
    """Canonicalise `model`, then apply random elements of every class it admits, alone and composed, and
    compare logits with the original. Also checks that the composed transform's inverse restores the model.
    Classes the adapter declares not exact for this model (arch.unsupported) are left out; asking for one in
    `classes` raises UnsupportedModel."""
    model = model.eval()
    gen = torch.Generator().manual_seed(seed)
    adapter = adapter_for(model)
    arch = adapter.arch(model)
    if classes is not None:
        refuse_unsupported(arch, classes)
    x = probe_inputs(model, gen=gen)
    ref = logits(model, x)
    checks = []

    def run(name, make):
        t0 = time.perf_counter()
        m = make()
        dl, dloss = compare(ref, m, x, arch.task)
        checks.append(Check(name, dl, dloss, time.perf_counter() - t0, dl <= tol and dloss <= tol))

    canon = canonical_model(model)
    run("canonical", lambda: canon)
    for cls in [c for c in classes or exact_classes(arch) if c != "rectangular"]:
        run(cls, lambda: transform_model(canon, random_class_element(cls, arch, gen)))
    if (classes is None and "rectangular" not in arch.unsupported) or (classes and "rectangular" in classes):
        o = random_mean_preserving_embedding(arch.d_model, 2 * arch.d_model, gen)
        run("rectangular", lambda: widen_model(model, 2 * arch.d_model, d_mlp=arch.d_mlp + arch.d_mlp // 4, o=o))
    full = random_full_transform(arch, gen)
    moved = transform_model(canon, full)
    run("composed", lambda: moved)
    run("composed∘inverse", lambda: transform_model(moved, full.inverse(), canonicalise_first=False))
    return checks
