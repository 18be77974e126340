"""Hugging Face ViT (ViTForImageClassification, ViTModel with pooler) through the conformance suite."""

from transformers import ViTModel

from adapter_suite import AdapterConformance
from factories import hf_vit, seeded


class TestHFViTConformance(AdapterConformance):
    family = "hf-vit"
    declared_checks = {"canonical", "residual", "residual:permutation", "heads", "ov", "mlp", "mlp:zero-pad",
                       "composed", "composed∘inverse", "qk", "rectangular"}
    configs = {
        "gelu-d16h2": seeded(hf_vit),
        "relu-c1-d24h3-noqkvbias": seeded(hf_vit, channels=1, width=24, heads=3, mlp=40, act="relu",
                                          qkv_bias=False),
        "tanh-L1-d32h4-eps1e-12": seeded(hf_vit, layers=1, width=32, heads=4, mlp=48, act="gelu_pytorch_tanh",
                                         eps=1e-12),
        "ViTModel-pooler-d24h4": seeded(hf_vit, width=24, heads=4, mlp=24, pooler_model=True),
        "patch2-d16h8-quickgelu": seeded(hf_vit, patch=2, width=16, heads=8, mlp=20, act="quick_gelu", channels=2),
    }
    circuit_configs = set(configs) - {"ViTModel-pooler-d24h4"}  # a pooler is not a head

    def test_configs_cover_bias_free_and_pooler(self):
        models = [self.make(c) for c in self.configs]
        assert {m.config.qkv_bias for m in models} == {True, False}
        assert any(isinstance(m, ViTModel) for m in models) and not all(isinstance(m, ViTModel) for m in models)
