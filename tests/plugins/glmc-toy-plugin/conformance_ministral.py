"""The plugin family through glmc's adapter conformance suite (tests/conformance/adapter_suite.py), as a family's
conformance entry: tests/e2e/test_plugins.py runs it with the plugin installed."""

from adapter_suite import AdapterConformance
from factories import factory


class TestMinistralConformance(AdapterConformance):
    family = "ministral"
    declared_checks = {"canonical", "residual", "residual:permutation", "residual:signed-permutation", "query_heads",
                       "kv_heads", "qk", "ov", "mlp", "mlp:zero-pad", "mlp_scale", "composed", "composed∘inverse"}
    configs = {
        # sliding-window layers beside full-attention ones: no weight symmetry sees the window
        # (Ministral's config leaves head_dim unset: give it)
        "L2-d32-h4kv2-sliding": factory("MinistralForCausalLM", head_dim=8, sliding_window=4,
                                        layer_types=["sliding_attention", "full_attention"]),
        "L2-d32-h4kv4-tied": factory("MinistralForCausalLM", head_dim=8, kv=4, tied=True),
        "L1-d24-h4kv1-relu": factory("MinistralForCausalLM", layers=1, width=24, kv=1, mlp=36, head_dim=6,
                                     hidden_act="relu"),
    }

    def test_configs_cover_activations_and_head_shapes(self):
        # gated units never split (the base asks for a ReLU config for that): several gates and head layouts here
        from glmc.adapters import adapter_for

        archs = [adapter_for(m).arch(m) for m in (self.make(c) for c in self.configs)]
        assert len({a.activation for a in archs}) >= 2 and not any(a.relu for a in archs)
        assert len({(a.n_head, a.d_head) for a in archs}) >= 2
