"""HF GPT-2 (GPT2LMHeadModel) through the adapter conformance suite (adapter_suite.py)."""

import torch

from adapter_suite import AdapterConformance
from factories import gpt2, seeded
from glmc.view.model_ops import canonical_model


class TestGPT2Conformance(AdapterConformance):
    family = "gpt2"
    declared_checks = {"canonical", "residual", "residual:permutation", "heads", "qk", "ov", "mlp", "mlp:zero-pad",
                       "rectangular", "composed", "composed∘inverse"}
    configs = {
        "L2-d32h4-gelu_new-tied": seeded(gpt2, n_layer=2, n_embd=32, n_head=4, n_inner=48, activation="gelu_new",
                                         tied=True),
        "L2-d32h8-relu-untied": seeded(gpt2, n_layer=2, n_embd=32, n_head=8, n_inner=48, activation="relu",
                                       tied=False),
        "L1-d24h3-gelu-untied": seeded(gpt2, n_layer=1, n_embd=24, n_head=3, n_inner=40, activation="gelu",
                                       tied=False),
        "L2-d16h2-relu-tied": seeded(gpt2, n_layer=2, n_embd=16, n_head=2, n_inner=24, activation="relu", tied=True),
        # one head of the full width: the head permutation group is trivial, qk/ov maps are d×d
        "L1-d16h1-tanh-tied-mlp20": seeded(gpt2, n_layer=1, n_embd=16, n_head=1, n_inner=20,
                                           activation="gelu_pytorch_tanh", tied=True),
    }
    circuit_configs = set(configs)  # every GPT-2 has a circuit form

    def test_configs_cover_tied_and_untied_heads(self):
        tied = {self.make(c).config.tie_word_embeddings for c in self.configs}
        assert tied == {True, False}

    def test_folding_unties_a_tied_head_and_sets_the_gains_to_one(self, config):
        model = self.make(config)
        canon = canonical_model(model)
        # folding the final LayerNorm gain into the LM head unties it from the embedding
        assert canon.config.tie_word_embeddings is False
        assert canon.lm_head.weight.data_ptr() != canon.transformer.wte.weight.data_ptr()
        assert all(torch.all(p == 1) for n, p in canon.named_parameters() if n.endswith(("ln_1.weight", "ln_2.weight")))
