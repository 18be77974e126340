"""HF Gemma (v1) decoders through the adapter conformance suite (adapter_suite.py), and the checks of what
Gemma adds to Llama: the 1 + w norm gain, the √d embedding scale and the tied head folding unties."""

import pytest
import torch
import transformers

from adapter_suite import AdapterConformance, max_diff
from factories import decoder, factory
from glmc.adapters import UnsupportedModel, adapter_for
from glmc.invariance import probe_inputs
from glmc.models import load_model, save_model
from glmc.view.model_ops import canonical_model, widen_model

GEMMA = "GemmaForCausalLM"


class TestGemmaConformance(AdapterConformance):
    family = "gemma"
    declared_checks = {"canonical", "residual", "residual:permutation", "residual:signed-permutation", "query_heads",
                       "kv_heads", "qk", "ov", "mlp", "mlp:zero-pad", "mlp_scale", "composed", "composed∘inverse"}
    configs = {
        "gemma-L2-d32-h4kv1-mqa-tied-dh8": factory(GEMMA, kv=1, head_dim=8, tied=True),
        "gemma-L2-d32-h4kv2-gqa-untied-dh8": factory(GEMMA, kv=2, head_dim=8),
        "gemma-L1-d24-h2kv2-mha-silu-dh16": factory(GEMMA, layers=1, width=24, heads=2, kv=2, mlp=36, head_dim=16,
                                                    hidden_act="silu", tied=True),
        "gemma-L2-d32-h4kv2-bias-dh8": factory(GEMMA, kv=2, head_dim=8, attention_bias=True),
    }

    def test_configs_cover_activations_and_head_shapes(self):
        archs = [adapter_for(m).arch(m) for m in (self.make(c) for c in self.configs)]
        assert len({a.activation for a in archs}) >= 2 and not any(a.relu for a in archs)
        assert len({(a.n_head, a.d_head) for a in archs}) >= 2

    def test_configs_cover_multi_query_and_grouped_query(self):
        models = [self.make(c) for c in self.configs]
        assert {m.config.num_key_value_heads for m in models} >= {1, 2}
        assert {m.config.tie_word_embeddings for m in models} == {True, False}


def test_the_gain_is_declared_one_plus_w_and_folding_folds_it():
    model = decoder(GEMMA, kv=1, head_dim=8, tied=True)
    adapter = adapter_for(model)
    arch = adapter.arch(model)
    assert {spec.gain for spec in arch.norms.values()} == {"1+w"}
    canon = canonical_model(model)
    x = probe_inputs(model)
    assert max_diff(model, canon, x) <= 1e-5
    # folded: every stored w is 0, i.e. a gain of exactly 1 (folding w instead of 1 + w would change the logits)
    assert all(torch.equal(p, torch.zeros_like(p)) for n, p in canon.named_parameters() if "norm" in n)
    wrong = adapter.to_canonical(model)
    wrong["blocks.0.attn.q.w"] = wrong["blocks.0.attn.q.w"] * wrong["blocks.0.ln1.w"]
    wrong["blocks.0.ln1.w"] = torch.zeros_like(wrong["blocks.0.ln1.w"])
    assert max_diff(model, adapter.from_canonical(wrong, model), x) > 1e-2


def test_the_embedding_scale_is_hfs_float32_constant_and_survives_rebuilds():
    model = decoder(GEMMA, kv=1, head_dim=8, tied=True)
    scale = model.model.embed_tokens.embed_scale
    assert scale.dtype == torch.float32 and float(scale) == pytest.approx(32 ** 0.5)
    rebuilt = canonical_model(model)
    assert torch.equal(rebuilt.model.embed_tokens.embed_scale, scale)


def test_folding_unties_the_head_and_the_written_config_says_so(tmp_path):
    model = decoder(GEMMA, kv=1, head_dim=8, tied=True)
    x = probe_inputs(model)
    canon = canonical_model(model)
    assert not canon.config.tie_word_embeddings
    assert canon.lm_head.weight.data_ptr() != canon.model.embed_tokens.weight.data_ptr()
    save_model(canon, tmp_path / "c")
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "c").eval()
    assert not again.config.tie_word_embeddings
    assert max_diff(model, again, x) <= 1e-4
    back, _ = load_model(tmp_path / "c")
    assert max_diff(model, back, x) <= 1e-4


def test_widening_and_later_gemmas_are_refused_by_name():
    model = decoder(GEMMA, layers=1, kv=1, head_dim=8)
    with pytest.raises(UnsupportedModel, match="√d"):
        widen_model(model, 64)
    cfg = transformers.Gemma2Config(vocab_size=61, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                    num_key_value_heads=2, intermediate_size=40, head_dim=8)
    with pytest.raises(UnsupportedModel, match="Gemma2ForCausalLM: .*signed permutations"):
        adapter_for(transformers.Gemma2ForCausalLM(cfg))
