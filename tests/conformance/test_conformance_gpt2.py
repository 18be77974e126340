"""HF GPT-2 (GPT2LMHeadModel) through the adapter conformance suite (adapter_suite.py)."""

from adapter_suite import AdapterConformance
from factories import gpt2, seeded


class TestGPT2Conformance(AdapterConformance):
    family = "gpt2"
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

    def test_configs_cover_tied_and_untied_heads(self):
        tied = {self.make(c).config.tie_word_embeddings for c in self.configs}
        assert tied == {True, False}
