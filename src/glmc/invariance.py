"""Function-preservation checks: the core invariant that a symmetry transform never changes the function."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from glmc.adapters import adapter_for, batch_of
from glmc.symmetry.random import exact_classes, random_class_element, random_full_transform
from glmc.tasks import task as get_task
from glmc.view.model_ops import canonical_model, logits, refuse_unsupported, transform_model, widen_model
from glmc.view.widen import residual_embedding


@dataclass
class Check:
    name: str
    max_dlogits: float
    dloss: float
    seconds: float
    ok: bool


def probe_inputs(model, n: int = 2, seq: int = 32, gen: torch.Generator | None = None) -> torch.Tensor:
    """Random CPU inputs a model accepts (token ids for LMs, pixels for image models), from its adapter."""
    return adapter_for(model, check=False).probe_inputs(model, n, seq, gen or torch.Generator().manual_seed(0))


def compare(ref_logits: torch.Tensor, model, inputs: torch.Tensor, task: str) -> tuple[float, float]:
    """(max |Δlogits|, |Δloss|) of `model` against reference logits; the loss uses random targets for
    classifiers and next tokens for LMs."""
    out = logits(model, inputs)
    if out.shape != ref_logits.shape:
        raise ValueError(f"output shape changed: {tuple(ref_logits.shape)} -> {tuple(out.shape)}")
    return float((out - ref_logits).abs().max()), abs(_loss(out, inputs, task) - _loss(ref_logits, inputs, task))


def _loss(out: torch.Tensor, inputs: torch.Tensor, task: str) -> float:
    targets = get_task(task).probe_targets
    if targets == "next":
        next_tokens = inputs[:, 1:].reshape(-1).to(out.device)
        return float(F.cross_entropy(out[:, :-1].reshape(-1, out.shape[-1]), next_tokens))
    if targets == "same":  # one prediction per position (a masked LM): the input token itself
        return float(F.cross_entropy(out.reshape(-1, out.shape[-1]), inputs.reshape(-1).to(out.device)))
    targets = torch.arange(out.shape[0], device=out.device) % out.shape[-1]
    return float(F.cross_entropy(out, targets))


@torch.no_grad()
def side_outputs(model, inputs: torch.Tensor) -> dict:
    """float32 outputs besides the logits that the model's adapter says a symmetry must keep (Adapter.side_outputs)."""
    adapter = adapter_for(model, check=False)
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in batch_of(adapter, inputs).items()}
    return {k: v.float() for k, v in adapter.side_outputs(model, batch).items()}


def verify_model(model, seed: int = 0, tol: float = 1e-4, classes: list[str] | None = None) -> list[Check]:
    """Canonicalise `model`, then apply random elements of every class it declares (glmc/symmetry/random.py),
    alone and composed, and compare logits with the original. Also checks that the composed transform's inverse
    restores the model, and (unless refused) the exact embedding into a wider model ("rectangular"). Classes the
    adapter declares not exact for this model (arch.unsupported) are left out; asking for one in `classes`
    raises UnsupportedModel. The model is evaluated in eval mode and left in the mode it was in."""
    was_training = model.training
    model.eval()
    try:
        return _verify(model, seed, tol, classes)
    finally:
        model.train(was_training)


def _verify(model, seed, tol, classes) -> list[Check]:
    gen = torch.Generator().manual_seed(seed)
    adapter = adapter_for(model)
    arch = adapter.arch(model)
    if classes is not None:
        refuse_unsupported(arch, classes)
    x = probe_inputs(model, gen=gen)
    ref = logits(model, x)
    checks = []

    side = side_outputs(model, x)

    def run(name, make):
        t0 = time.perf_counter()
        m = make()
        dl, dloss = compare(ref, m, x, arch.task)
        for key, value in side_outputs(m, x).items():  # outputs besides the logits (a next-sentence head)
            dl = max(dl, float((value - side[key]).abs().max()))
        checks.append(Check(name, dl, dloss, time.perf_counter() - t0, dl <= tol and dloss <= tol))

    canon = canonical_model(model)
    run("canonical", lambda: canon)
    for cls in [c for c in classes or exact_classes(arch) if c != "rectangular"]:
        run(cls, lambda cls=cls: transform_model(canon, random_class_element(cls, arch, gen)))
    if (classes is None and "rectangular" not in arch.unsupported) or (classes and "rectangular" in classes):
        o = residual_embedding(arch, 2 * arch.d_model, gen)
        run("rectangular", lambda: widen_model(model, 2 * arch.d_model, d_mlp=arch.d_mlp + arch.d_mlp // 4, o=o))
    full = random_full_transform(arch, gen)
    moved = transform_model(canon, full)
    run("composed", lambda: moved)
    run("composed∘inverse", lambda: transform_model(moved, full.inverse(arch), canonicalise_first=False))
    return checks
