"""timm VisionTransformer through the conformance suite: token and average pooling, register tokens, LayerScale,
bias-free projections, no class token / position embedding, and qk_norm (whose declared groups drop "qk")."""

from adapter_suite import AdapterConformance
from factories import seeded, timm_vit


class TestTimmViTConformance(AdapterConformance):
    family = "timm-vit"
    declared_checks = {"canonical", "residual", "residual:permutation", "heads", "ov", "mlp", "mlp:zero-pad",
                       "composed", "composed∘inverse"}  # qk and rectangular: all but qk_norm
    configs = {
        "token-gelu-d16h2": seeded(timm_vit),
        "avg-fcnorm-reg2-ls-relu-d24h3": seeded(timm_vit, in_chans=1, global_pool="avg", reg_tokens=2, init_values=0.1,
                                                act_layer="relu", embed_dim=24, num_heads=3, mlp_ratio=2.5),
        "noembedclass-reg1-nobias-ls-tanh-d24h4": seeded(timm_vit, no_embed_class=True, reg_tokens=1, qkv_bias=False,
                                                         proj_bias=False, init_values=1e-2, act_layer="gelu_tanh",
                                                         embed_dim=24, num_heads=4),
        "avg-norm-noclass-nopos-c2-d32h4": seeded(timm_vit, class_token=False, global_pool="avg", fc_norm=False,
                                                  pos_embed="none", in_chans=2, embed_dim=32, num_heads=4),
        "qknorm-ls-d32h4": seeded(timm_vit, qk_norm=True, embed_dim=32, num_heads=4, init_values=0.5),
    }
    circuit_configs = {"token-gelu-d16h2"}  # class token, no registers, a position embedding, no qk_norm

    def test_configs_cover_bias_free_pooling_and_qk_norm(self):
        from glmc.adapters import adapter_for

        models = {c: self.make(c) for c in self.configs}
        assert any(m.blocks[0].attn.qkv.bias is None and m.blocks[0].attn.proj.bias is None for m in models.values())
        assert {m.global_pool for m in models.values()} == {"token", "avg"}
        assert any(m.num_reg_tokens for m in models.values())
        qk = models["qknorm-ls-d32h4"]
        arch = adapter_for(qk).arch(qk)
        assert "qk" not in arch.groups and {"qk", "rectangular"} <= set(arch.unsupported)
        others = [adapter_for(m).arch(m) for c, m in models.items() if c != "qknorm-ls-d32h4"]
        assert all("qk" in a.groups and not a.unsupported for a in others)
