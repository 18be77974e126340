"""The null-space fill of an embedded narrow model: exact for any transform, and it really fills the free set."""

import pytest
import torch

from factories import hf_vit, timm_vit, tiny_gpt2
from glmc.adapters import adapter_for
from glmc.invariance import probe_inputs
from glmc.matching.nullspace import fill, free_probes, has_freedom, moved_probes, residual_probe
from glmc.symmetry.random import random_full_transform
from glmc.view.canonical import canonicalise
from glmc.view.model_ops import canonical_view, logits, widen_model
from glmc.view.widen import residual_embedding

# (narrow model, wide widths: d_model, n_head, d_mlp): extra heads, wider heads and extra MLP units all occur
CASES = {
    "gpt2-tied": (lambda: tiny_gpt2(n_embd=32, n_head=4), (64, 8, 160)),
    "gpt2-untied-relu": (lambda: tiny_gpt2(n_embd=32, n_head=4, tied=False, activation="relu", seed=1), (96, 4, 160)),
    "hf-vit": (lambda: hf_vit(width=16, heads=2, mlp=32), (48, 4, 64)),
    "timm-vit-avg-ls": (lambda: timm_vit(global_pool="avg", init_values=0.1, reg_tokens=2), (32, 2, 48)),
}


def _embedded(case, seed=0):
    make, (d, h, n) = CASES[case]
    narrow = make()
    o = residual_embedding(adapter_for(narrow).arch(narrow), d, torch.Generator().manual_seed(seed))
    return narrow, widen_model(narrow, d, n_head=h, d_mlp=n, o=o)


@pytest.mark.parametrize("case", list(CASES))
def test_fill_keeps_the_function_under_a_random_transform(case):
    narrow, wide = _embedded(case)
    adapter = adapter_for(wide)
    arch = adapter.arch(wide)
    view, _ = canonical_view(wide)
    view = {k: v.double() for k, v in view.items()}
    probes = free_probes(view, arch.n_layer)
    assert has_freedom(probes)
    # S: the narrow width, less the all-ones direction unless a LayerNorm bias writes into it
    n = adapter_for(narrow).arch(narrow).d_model
    assert probes[residual_probe(probes)].shape[0] in (n - 1, n)

    t = random_full_transform(arch, torch.Generator().manual_seed(3))
    moved = t.apply(view, arch)
    gen = torch.Generator().manual_seed(4)
    target = {k: torch.randn(v.shape, generator=gen, dtype=v.dtype) for k, v in view.items()}  # any reference
    filled = fill(target, moved, {k: v.double() for k, v in moved_probes(probes, t, arch).items()},
                  arch.n_layer)

    x = probe_inputs(narrow)
    rebuilt = adapter.from_canonical({k: v.float() for k, v in filled.items()}, wide)
    assert float((logits(narrow, x) - logits(rebuilt, x)).abs().max()) <= 1e-4
    # the fill moved B toward the target, and reached it exactly on whatever B cannot see
    before = sum(float((target[k] - moved[k]).pow(2).sum()) for k in view)
    after = sum(float((target[k] - filled[k]).pow(2).sum()) for k in view)
    assert after < 0.9 * before
    i = 0
    dead = moved[f"blocks.{i}.mlp.out.w"].abs().sum(-1) == 0  # padded units: their whole input side is free
    if dead.any():
        assert torch.allclose(filled[f"blocks.{i}.mlp.in.w"][dead], target[f"blocks.{i}.mlp.in.w"][dead])


def test_a_full_width_model_has_no_free_directions():
    model = tiny_gpt2(n_embd=32, n_head=4)
    view = canonicalise(adapter_for(model).to_canonical(model), adapter_for(model).arch(model))
    probes = free_probes(view, 2)
    assert not has_freedom(probes)  # only the all-ones direction, which no LayerNorm output has
