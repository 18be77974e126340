"""HF Qwen3 decoders through the adapter conformance suite (adapter_suite.py), and the checks that the QK
maps QK-norm leaves are exactly the plane signs (docs/families-qwen3-gemma-olmo.md)."""

import pytest
import torch

from adapter_suite import AdapterConformance, max_diff
from factories import decoder, factory
from glmc.adapters import UnsupportedModel, adapter_for
from glmc.invariance import probe_inputs
from glmc.symmetry.elements import LinearMap
from glmc.symmetry.kinds import ScaleRotation, kind
from glmc.symmetry.transform import Transform
from glmc.view.model_ops import canonical_model, transform_model, widen_model

QWEN3 = "Qwen3ForCausalLM"


class TestQwen3Conformance(AdapterConformance):
    family = "qwen3"
    declared_checks = {"canonical", "residual", "residual:permutation", "residual:signed-permutation", "query_heads",
                       "kv_heads", "qk", "ov", "mlp", "mlp:zero-pad", "mlp_scale", "composed", "composed∘inverse"}
    configs = {
        "qwen3-L2-d32-h4kv2-gqa-dh8": factory(QWEN3, head_dim=8),
        "qwen3-L2-d32-h4kv4-mha-dh8": factory(QWEN3, kv=4, head_dim=8),
        "qwen3-L1-d24-h4kv1-mqa-relu-dh6-tied": factory(QWEN3, layers=1, width=24, kv=1, mlp=36, head_dim=6,
                                                         hidden_act="relu", tied=True),
        "qwen3-L2-d32-h2kv2-bias-dh16": factory(QWEN3, heads=2, kv=2, head_dim=16, attention_bias=True),
    }

    def test_configs_cover_activations_and_head_shapes(self):
        archs = [adapter_for(m).arch(m) for m in (self.make(c) for c in self.configs)]
        assert len({a.activation for a in archs}) >= 2 and not any(a.relu for a in archs)
        assert len({(a.n_head, a.d_head) for a in archs}) >= 2
        assert {a.groups["qk"].kind for a in archs} == {"plane-sign"}

    def test_configs_cover_head_layouts_and_biases(self):
        models = [self.make(c) for c in self.configs]
        assert {m.config.num_attention_heads // m.config.num_key_value_heads for m in models} >= {1, 2, 4}
        views = [adapter_for(m).to_canonical(m) for m in models]
        assert any("blocks.0.attn.o.b" in v and "blocks.0.attn.q.b" in v for v in views)
        assert all(not torch.all(v["blocks.0.attn.q_norm.w"] == 1) for v in views)  # generic QK-norm gains


def _qk(maps: dict) -> Transform:
    return Transform({f"qk.{i}": LinearMap(m) for i, m in maps.items()})


@pytest.fixture(scope="module")
def qwen3():
    model = decoder(QWEN3, head_dim=8)
    arch = adapter_for(model).arch(model)
    return canonical_model(model), arch, probe_inputs(model)


def test_plane_signs_keep_the_function_and_nothing_near_them_does(qwen3):
    """QK maps act on q_proj / k_proj's outputs, before the per-head RMS norm, its gains and RoPE: plane signs
    (±I per rotary plane, q and k alike) keep the logits; the maps just outside change them."""
    canon, arch, x = qwen3
    gen = torch.Generator().manual_seed(0)
    n_kv, dh, h = arch.groups["qk"].batch, arch.d_head, arch.d_head // 2

    def moved(maps):
        return max_diff(canon, transform_model(canon, _qk(maps), canonicalise_first=False), x)

    signs = {i: kind("plane-sign").random(dh, n_kv, gen).matrix for i in range(arch.n_layer)}
    assert any(bool((m < 0).any()) for m in signs.values())
    assert moved(signs) <= 1e-5
    # Llama's QK group (scale-rotations) no longer commutes: the norm and its gains sit before RoPE
    assert moved({i: kind("scale-rotation").random(dh, n_kv, gen).matrix for i in range(arch.n_layer)}) > 1e-2
    # a pure rotation of each plane keeps every RMS and commutes with RoPE, but not with the generic gains
    angle = torch.full((n_kv, h), 0.7, dtype=torch.float64)
    rot = ScaleRotation.matrix(torch.stack([angle.cos(), angle.sin()], -1))
    assert moved({i: rot for i in range(arch.n_layer)}) > 1e-2
    # a sign on one coordinate of a plane only: RoPE mixes the plane's two coordinates
    half = torch.ones(n_kv, dh, dtype=torch.float64)
    half[:, 0] = -1
    assert moved({i: torch.diag_embed(half) for i in range(arch.n_layer)}) > 1e-2
    # swapping two planes (an orthogonal permutation that keeps the RMS): different gains and frequencies
    perm = torch.arange(dh)
    perm[[0, 1]], perm[[h, h + 1]] = perm[[1, 0]], perm[[h + 1, h]]
    assert moved({i: torch.eye(dh, dtype=torch.float64)[perm].expand(n_kv, dh, dh) for i in range(arch.n_layer)}) > 1e-2


def test_q_and_k_must_share_the_plane_signs(qwen3):
    canon, arch, x = qwen3
    adapter = adapter_for(canon)
    view = adapter.to_canonical(canon)
    h = arch.d_head // 2
    view["blocks.0.attn.q.w"][:, [0, h]] *= -1  # query side only
    assert max_diff(canon, adapter.from_canonical(view, canon), x) > 1e-2
    view["blocks.0.attn.k.w"][:, [0, h]] *= -1  # and the key side with it: the same function again
    assert max_diff(canon, adapter.from_canonical(view, canon), x) <= 1e-5


def test_query_heads_of_a_group_share_their_key_heads_signs(qwen3):
    canon, arch, x = qwen3
    adapter = adapter_for(canon)
    view = adapter.to_canonical(canon)
    h = arch.d_head // 2
    view["blocks.0.attn.q.w"][0, [1, 1 + h]] *= -1  # query head 0 of key/value group 0 (its sibling unchanged)
    view["blocks.0.attn.k.w"][0, [1, 1 + h]] *= -1
    assert max_diff(canon, adapter.from_canonical(view, canon), x) > 1e-2
    view["blocks.0.attn.q.w"][1, [1, 1 + h]] *= -1  # the whole group
    assert max_diff(canon, adapter.from_canonical(view, canon), x) <= 1e-5


def test_qk_norm_gains_are_shared_by_all_heads_so_permutations_leave_them(qwen3):
    canon, arch, _ = qwen3
    assert canon.model.layers[0].self_attn.q_norm.weight.shape == (arch.d_head,)
    assert canon.model.layers[0].self_attn.k_norm.weight.shape == (arch.d_head,)


def test_widening_and_moe_variants_are_refused_by_name():
    model = decoder(QWEN3, layers=1, head_dim=8)
    with pytest.raises(UnsupportedModel, match="rms_norm_eps"):
        widen_model(model, 64)
    import transformers

    cfg = transformers.Qwen3MoeConfig(vocab_size=61, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=40, moe_intermediate_size=16,
                                      num_experts=2, num_experts_per_tok=1, head_dim=8)
    with pytest.raises(UnsupportedModel, match="Qwen3MoeForCausalLM: mixture-of-experts"):
        adapter_for(transformers.Qwen3MoeForCausalLM(cfg))


def test_with_equal_gains_plane_rotations_survive_too_which_is_why_only_generic_gains_are_declared():
    """At initialisation (every q_norm / k_norm gain 1) a rotation of each plane commutes with the gains too, so the
    group is larger there; training moves the gains apart, and glmc declares the group of generic gains."""
    model = decoder(QWEN3, head_dim=8)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_norm.weight.fill_(1.3)
            layer.self_attn.k_norm.weight.fill_(0.7)
    canon = canonical_model(model)
    arch = adapter_for(model).arch(model)
    n_kv, h = arch.groups["qk"].batch, arch.d_head // 2
    angle = torch.rand(n_kv, h, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 6.28
    rot = ScaleRotation.matrix(torch.stack([angle.cos(), angle.sin()], -1))
    moved = transform_model(canon, _qk({i: rot for i in range(arch.n_layer)}), canonicalise_first=False)
    assert max_diff(canon, moved, probe_inputs(model)) <= 1e-5
