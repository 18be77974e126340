"""HF GPT-2 (GPT2LMHeadModel) through the adapter conformance suite (tests/conformance.py)."""

import torch

from conformance import AdapterConformance
from conftest import tiny_gpt2


def gpt2(seed=0, **kw):
    """tiny_gpt2 (norms perturbed, weights ×3) with non-zero biases as well (GPT-2 initialises them to 0)."""
    model = tiny_gpt2(seed=seed, **kw)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and ".ln_" not in name and "ln_f" not in name:
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
    return model.eval()


def config(**kw):
    return lambda seed: gpt2(seed=seed, **kw)


class TestGPT2Conformance(AdapterConformance):
    family = "gpt2"
    configs = {
        "L2-d32h4-gelu_new-tied": config(n_layer=2, n_embd=32, n_head=4, n_inner=48, activation="gelu_new", tied=True),
        "L2-d32h8-relu-untied": config(n_layer=2, n_embd=32, n_head=8, n_inner=48, activation="relu", tied=False),
        "L1-d24h3-gelu-untied": config(n_layer=1, n_embd=24, n_head=3, n_inner=40, activation="gelu", tied=False),
        "L2-d16h2-relu-tied": config(n_layer=2, n_embd=16, n_head=2, n_inner=24, activation="relu", tied=True),
        # one head of the full width: the head permutation group is trivial, qk/ov maps are d×d
        "L1-d16h1-tanh-tied-mlp20": config(n_layer=1, n_embd=16, n_head=1, n_inner=20,
                                           activation="gelu_pytorch_tanh", tied=True),
    }

    def test_configs_cover_tied_and_untied_heads(self):
        tied = {self.make(c).config.tie_word_embeddings for c in self.configs}
        assert tied == {True, False}
