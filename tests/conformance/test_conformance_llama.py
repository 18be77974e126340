"""HF Llama-family decoders (Llama, Mistral, Qwen2) through the adapter conformance suite (adapter_suite.py),
plus the checks that their declared groups are exactly the ones RoPE, grouped-query attention and SwiGLU allow."""

import pytest
import torch

from adapter_suite import AdapterConformance, max_diff
from factories import LLAMA_CLASSES, llama, seeded
from glmc.adapters import UnsupportedModel, adapter_for
from glmc.invariance import probe_inputs
from glmc.symmetry.elements import IndexMap
from glmc.symmetry.kinds import kind
from glmc.view.model_ops import canonical_model, transform_model


class TestLlamaConformance(AdapterConformance):
    family = "llama"
    declared_checks = {"canonical", "residual", "residual:permutation", "residual:signed-permutation", "query_heads",
                       "kv_heads", "qk", "ov", "mlp", "mlp:zero-pad", "mlp_scale", "composed", "composed∘inverse",
                       "rectangular"}
    configs = {
        "llama-L2-d32-h4kv4-mha-untied": seeded(llama, kv=4),
        "llama-L2-d32-h4kv2-gqa-tied": seeded(llama, kv=2, tied=True),
        "mistral-L2-d32-h8kv2-gqa4": seeded(llama, model_type="mistral", heads=8, kv=2, mlp=48),
        "qwen2-L2-d32-h4kv2-qkv-bias": seeded(llama, model_type="qwen2", kv=2),
        # multi-query attention; a gated ReLU (any elementwise gate keeps the groups exact); head_dim ≠ d/H
        "llama-L1-d24-h4kv1-mqa-relu-dh8": seeded(llama, layers=1, width=24, heads=4, kv=1, mlp=36, act="relu",
                                                  head_dim=8),
        "qwen2-L1-d16-h2kv1-mqa-tied": seeded(llama, model_type="qwen2", layers=1, width=16, heads=2, kv=1,
                                              mlp=24, tied=True),
        # gate, up and down biases: the gate bias follows the units, the up bias their scale, the down bias is a
        # residual writer
        "llama-L2-d32-h4kv2-mlp-bias": seeded(llama, kv=2, mlp_bias=True),
    }

    def test_configs_cover_activations_and_head_shapes(self):
        # the base asks for ReLU and non-ReLU configs because ReLU MLPs declare unit splitting; gated units never
        # split, so here: more than one gate activation, and several head counts / sizes
        archs = [adapter_for(m).arch(m) for m in (self.make(c) for c in self.configs)]
        assert len({a.activation for a in archs}) >= 2 and not any(a.relu for a in archs)
        assert len({(a.n_head, a.d_head) for a in archs}) >= 2

    def test_configs_cover_families_and_head_layouts(self):
        models = [self.make(c) for c in self.configs]
        assert {type(m).__name__ for m in models} == set(LLAMA_CLASSES.values())
        ratios = {m.config.num_attention_heads // m.config.num_key_value_heads for m in models}
        assert {1, 2, 4} <= ratios
        assert {m.config.tie_word_embeddings for m in models} == {True, False}
        assert any("attn.q.b" in k for k in adapter_for(models[3]).to_canonical(models[3]))


def test_declared_groups_are_the_exact_ones():
    """Negative controls: the maps just outside each declared group change the function."""
    model = llama(kv=2)
    adapter = adapter_for(model)
    arch = adapter.arch(model)
    canon = canonical_model(model)
    x = probe_inputs(model)
    gen = torch.Generator().manual_seed(0)
    # a general invertible QK map does not commute with RoPE (the declared scale-rotation does)
    general = {f"qk.{i}": kind("invertible").random(arch.d_head, 2, gen) for i in range(arch.n_layer)}
    assert max_diff(canon, transform_model(canon, _t(general), canonicalise_first=False), x) > 1e-2
    # a query head moved to another key/value group reads the wrong keys
    across = {"query_heads.0": IndexMap(torch.tensor([2, 1, 0, 3]))}
    assert max_diff(canon, transform_model(canon, _t(across), canonicalise_first=False), x) > 1e-2
    # the gate cannot be scaled: scaling gate instead of up breaks SwiGLU (shown on the view, by hand)
    view = adapter.to_canonical(canon)
    view["blocks.0.mlp.gate.w"] = view["blocks.0.mlp.gate.w"] * 2
    view["blocks.0.mlp.out.w"] = view["blocks.0.mlp.out.w"] / 2
    assert max_diff(canon, adapter.from_canonical(view, canon), x) > 1e-2


def _t(elements):
    from glmc.symmetry.transform import Transform

    return Transform(elements)


def test_grouped_query_transforms_invert_and_compose():
    """kv_heads, then query heads inside the groups, then per-kv maps: inverse and composition on the view."""
    from glmc.symmetry.random import random_full_transform

    model = llama(model_type="mistral", heads=8, kv=2, mlp=48)
    adapter = adapter_for(model)
    arch = adapter.arch(model)
    view = adapter.to_canonical(canonical_model(model))
    gen = torch.Generator().manual_seed(1)
    t1, t2 = random_full_transform(arch, gen), random_full_transform(arch, gen)
    assert not torch.equal(t1["query_heads.0"].src, torch.arange(8))
    back = t1.inverse(arch).apply(t1.apply(view, arch), arch)
    assert all(torch.allclose(back[k], view[k], atol=1e-5) for k in view)
    seq, once = t2.apply(t1.apply(view, arch), arch), t1.then(t2, arch).apply(view, arch)
    assert all(torch.allclose(seq[k], once[k], atol=1e-5) for k in view)
    # the composed query permutation still keeps every query head inside its (moved) group
    q = t1.then(t2, arch)["query_heads.0"].src
    assert torch.equal(q // 4, torch.arange(8) // 4)
    # self without query maps, other with them (and the reverse) compose too
    only_kv = _t({k: v for k, v in t1.elements.items() if not k.startswith("query_heads")})
    for a, b in ((only_kv, t2), (t2, only_kv)):
        seq, once = b.apply(a.apply(view, arch), arch), a.then(b, arch).apply(view, arch)
        assert all(torch.allclose(seq[k], once[k], atol=1e-5) for k in view)


@pytest.mark.parametrize("change, match", [
    (dict(model_type="llama", attention_bias=True), "attention_bias"),
])
def test_inexact_variants_are_refused_by_name(change, match):
    model = llama(layers=1, **change)
    with pytest.raises(UnsupportedModel, match=match):
        adapter_for(model)


def test_partial_rotary_and_circuit_mode_are_refused():
    model = llama(layers=1)
    model.config.rope_parameters = dict(model.config.rope_parameters, partial_rotary_factor=0.5)
    with pytest.raises(UnsupportedModel, match="partial rotary"):
        adapter_for(model)
    model = llama(layers=1)
    with pytest.raises(UnsupportedModel, match="circuit mode"):
        adapter_for(model).io_spec(model)


def test_mlp_biases_move_as_declared():
    """mlp_bias=True: the up bias takes the unit's scale and the gate bias does not (negative controls by hand)."""
    from glmc.symmetry.random import random_class_element

    model = llama(kv=2, mlp_bias=True)
    adapter = adapter_for(model)
    arch = adapter.arch(model)
    canon = canonical_model(model)
    x = probe_inputs(model)
    view = adapter.to_canonical(canon)
    scale = random_class_element("mlp_scale", arch, torch.Generator().manual_seed(0))
    moved = scale.apply(view, arch)
    assert max_diff(canon, adapter.from_canonical(moved, canon), x) <= 1e-4
    assert not torch.allclose(moved["blocks.0.mlp.in.b"], view["blocks.0.mlp.in.b"])
    assert torch.equal(moved["blocks.0.mlp.gate.b"], view["blocks.0.mlp.gate.b"])
    wrong = dict(moved, **{"blocks.0.mlp.in.b": view["blocks.0.mlp.in.b"]})  # the up bias left unscaled
    assert max_diff(canon, adapter.from_canonical(wrong, canon), x) > 1e-2
    s = scale["mlp_scale.0"].scale.float()
    wrong = dict(moved, **{"blocks.0.mlp.gate.b": view["blocks.0.mlp.gate.b"] * s})  # the gate bias scaled too
    assert max_diff(canon, adapter.from_canonical(wrong, canon), x) > 1e-2
