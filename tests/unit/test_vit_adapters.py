"""HF ViT and timm VisionTransformer adapters beyond the conformance suite: round trip and every symmetry class on
layouts its configs do not build, folding of LayerScale, qk_norm's refusals, widening, refusals by name, and
agreement between the two families on a model converted from one to the other."""

import pytest
import torch

from factories import hf_vit, perturb_vit, timm_vit
from glmc.adapters import UnsupportedModel, adapter_for
from glmc.adapters.hf_vit import HFViTAdapter
from glmc.adapters.timm_vit import TimmViTAdapter
from glmc.invariance import probe_inputs, verify_model
from glmc.models import _timm_from_kwargs, load_model, save_model
from glmc.symmetry.random import exact_classes, random_class_element, random_full_transform
from glmc.view.model_ops import canonical_model, logits, transform_model, widen_model
from glmc.view.widen import residual_embedding

TOL = 1e-4
# HF hidden_act -> timm act_layer with the same function
HF_TO_TIMM_ACT = {"gelu": "gelu", "relu": "relu", "gelu_pytorch_tanh": "gelu_tanh", "quick_gelu": "quick_gelu",
                  "silu": "silu"}


HF_CONFIGS = {
    "gelu-d16h2": dict(),
    "relu-c1-i12-d24h3-noqkvbias": dict(image=12, channels=1, width=24, heads=3, mlp=40, act="relu", qkv_bias=False),
    "tanh-L3-d32h4-eps1e-12": dict(layers=3, width=32, heads=4, mlp=48, act="gelu_pytorch_tanh", eps=1e-12),
    "ViTModel-pooler": dict(width=24, heads=4, mlp=24, pooler_model=True),
}
TIMM_CONFIGS = {
    "token-gelu": dict(),
    "avg-fcnorm-reg2-ls-relu": dict(img_size=12, in_chans=1, global_pool="avg", reg_tokens=2, init_values=0.1,
                                    act_layer="relu", embed_dim=24, num_heads=3, mlp_ratio=2.5),
    "noembedclass-reg-nobias-ls-tanh": dict(no_embed_class=True, reg_tokens=1, qkv_bias=False, proj_bias=False,
                                            init_values=1e-2, act_layer="gelu_tanh", embed_dim=24, num_heads=4),
    "avg-norm-noclass-nopos-dynamic": dict(class_token=False, global_pool="avg", fc_norm=False, pos_embed="none",
                                           dynamic_img_size=True, in_chans=2, depth=3, embed_dim=32, num_heads=4),
    "avg-includeprefix-eps1e-5": dict(global_pool="avg", pool_include_prefix=True, norm_eps=1e-5, reg_tokens=2),
    "qknorm": dict(qk_norm=True, embed_dim=32, num_heads=4, init_values=0.5),
}
# the round trip and every symmetry class on the layouts tests/conformance/test_conformance_*_vit.py does not build
# (12×12 images, 3 layers, dynamic image size, average pooling over the prefix tokens); the other configs here
# are the conformance configs' twins and are only used by the tests below that check something else
BEYOND_CONFORMANCE = [("hf", "relu-c1-i12-d24h3-noqkvbias"), ("hf", "tanh-L3-d32h4-eps1e-12"),
                      ("timm", "avg-fcnorm-reg2-ls-relu"), ("timm", "avg-norm-noclass-nopos-dynamic"),
                      ("timm", "avg-includeprefix-eps1e-5")]


def make(family, name, seed=0):
    return hf_vit(seed=seed, **HF_CONFIGS[name]) if family == "hf" else timm_vit(seed=seed, **TIMM_CONFIGS[name])


def _max_diff(a, b, x):
    return float((logits(a, x) - logits(b, x)).abs().max())


def _state_equal(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("family,name", BEYOND_CONFORMANCE)
def test_round_trip_is_bit_exact(family, name):
    model = make(family, name)
    adapter = adapter_for(model)
    assert adapter.family == ("hf-vit" if family == "hf" else "timm-vit")
    view = adapter.to_canonical(model)
    rebuilt = adapter.from_canonical(view, model)
    assert type(rebuilt) is type(model)
    assert _state_equal(model, rebuilt)
    x = probe_inputs(model)
    assert _max_diff(model, rebuilt, x) == 0.0
    assert float(logits(model, x).abs().max()) > 0.3  # non-trivial outputs: the checks below mean something


@pytest.mark.parametrize("family,name", BEYOND_CONFORMANCE)
def test_every_class_alone_and_composed_keeps_logits(family, name):
    model = make(family, name, seed=1)
    arch = adapter_for(model).arch(model)
    checks = verify_model(model, seed=1)
    names = {c.name for c in checks}
    expected = {"canonical", "residual", "residual:permutation", "heads", "ov", "mlp", "mlp:zero-pad", "composed",
                "composed∘inverse"}
    assert expected <= names
    assert ("mlp:semi-permutation" in names) == arch.relu
    assert ({"qk", "rectangular"} <= names) == (name != "qknorm")
    for c in checks:
        assert c.max_dlogits <= TOL and c.dloss <= TOL, c


def test_layer_scale_and_norms_are_folded():
    model = timm_vit(**TIMM_CONFIGS["avg-fcnorm-reg2-ls-relu"])
    canon = canonical_model(model)
    for blk in canon.blocks:
        for p in (blk.ls1.gamma, blk.ls2.gamma, blk.norm1.weight, blk.norm2.weight):
            assert torch.all(p == 1)
        assert torch.all(blk.norm1.bias == 0)
    assert torch.all(canon.fc_norm.weight == 1) and isinstance(canon.norm, torch.nn.Identity)
    # every writer mean-centred: the patch conv's output side, cls and register tokens, position embeddings
    for t in (canon.patch_embed.proj.weight.sum(0), canon.cls_token[0].T, canon.reg_token[0].T, canon.pos_embed[0].T,
              canon.blocks[0].attn.proj.weight):
        assert t.double().mean(0).abs().max() < 1e-6
    assert _max_diff(model, canon, probe_inputs(model)) <= TOL


def test_qk_norm_restricts_exactly_the_broken_classes():
    model = timm_vit(**TIMM_CONFIGS["qknorm"])
    arch = adapter_for(model).arch(model)
    assert set(arch.unsupported) == {"qk", "rectangular"} and "qk_norm" in arch.unsupported["qk"]
    assert "qk" not in exact_classes(arch) and not any(g.startswith("qk.") for g in random_full_transform(
        arch, torch.Generator()).elements)
    plain = timm_vit(**{**TIMM_CONFIGS["qknorm"], "qk_norm": False})
    plain_arch = adapter_for(plain).arch(plain)
    qk = random_class_element("qk", plain_arch, torch.Generator().manual_seed(0))
    with pytest.raises(UnsupportedModel, match="qk_norm"):
        transform_model(model, qk)
    with pytest.raises(UnsupportedModel, match="qk_norm"):
        verify_model(model, classes=["qk"])
    with pytest.raises(UnsupportedModel, match="qk_norm"):
        widen_model(model, 64)
    # the refusal is warranted: forced through the canonical view, a QK map changes the function
    adapter = adapter_for(model)
    forced = adapter.from_canonical(qk.apply(adapter.to_canonical(model), plain_arch), model)
    assert _max_diff(model, forced, probe_inputs(model)) > 1e-2
    # ... and the same map is exact without qk_norm
    assert _max_diff(plain, transform_model(plain, qk), probe_inputs(plain)) <= TOL


@pytest.mark.parametrize("family,name", [("hf", "relu-c1-i12-d24h3-noqkvbias"),
                                         ("timm", "noembedclass-reg-nobias-ls-tanh")])
def test_widened_model_saves_and_reloads(family, name, tmp_path):
    model = make(family, name)
    arch = adapter_for(model).arch(model)
    o = residual_embedding(arch, 2 * arch.d_model, torch.Generator().manual_seed(0))
    wide = widen_model(model, 2 * arch.d_model, n_head=2 * arch.n_head, d_mlp=arch.d_mlp + 8, o=o)
    wa = adapter_for(wide).arch(wide)
    assert (wa.d_model, wa.n_head, wa.d_head, wa.d_mlp) == (2 * arch.d_model, 2 * arch.n_head, arch.d_head,
                                                           arch.d_mlp + 8)
    assert wa.ln_eps == pytest.approx(arch.ln_eps / 2)
    save_model(wide, tmp_path / "wide")
    again, _ = load_model(tmp_path / "wide")
    assert _state_equal(wide, again)
    assert adapter_for(again).arch(again).ln_eps == pytest.approx(arch.ln_eps / 2)
    x = probe_inputs(model)
    assert _max_diff(wide, again, x) == 0.0
    assert _max_diff(model, again, x) <= TOL


def hf_to_timm(hf):
    """An equivalent timm ViT holding the HF model's weights, via the canonical view."""
    c = hf.config
    kwargs = dict(img_size=c.image_size, patch_size=c.patch_size, in_chans=c.num_channels, num_classes=c.num_labels,
                  embed_dim=c.hidden_size, depth=c.num_hidden_layers, num_heads=c.num_attention_heads,
                  mlp_ratio=c.intermediate_size / c.hidden_size, qkv_bias=c.qkv_bias,
                  act_layer=HF_TO_TIMM_ACT[c.hidden_act], global_pool="token")
    if c.layer_norm_eps != 1e-6:
        kwargs["norm_eps"] = c.layer_norm_eps
    with torch.device("meta"):
        template = _timm_from_kwargs(kwargs)
    return TimmViTAdapter().from_canonical(HFViTAdapter().to_canonical(hf), template)


def timm_to_hf(tm, template_hf):
    return HFViTAdapter().from_canonical(TimmViTAdapter().to_canonical(tm), template_hf)


@pytest.mark.parametrize("name", ["gelu-d16h2", "relu-c1-i12-d24h3-noqkvbias", "tanh-L3-d32h4-eps1e-12"])
def test_hf_and_timm_agree_on_a_converted_model(name):
    hf = make("hf", name)
    tm = hf_to_timm(hf)
    x = probe_inputs(hf)
    assert float((logits(hf, x) - logits(tm, x)).abs().max()) <= 1e-5
    # both adapters see the same canonical view, bit for bit, and converting back restores the HF weights
    va, vb = HFViTAdapter().to_canonical(hf), TimmViTAdapter().to_canonical(tm)
    assert va.keys() == vb.keys() and all(torch.equal(va[k], vb[k]) for k in va)
    assert _state_equal(hf, timm_to_hf(tm, hf))
    # the two families agree after the same symmetry transform, too
    t = random_full_transform(adapter_for(hf).arch(hf), torch.Generator().manual_seed(0))
    a, b = transform_model(hf, t), transform_model(tm, t)
    assert float((logits(a, x) - logits(b, x)).abs().max()) <= 1e-5
    assert _max_diff(hf, a, x) <= TOL


@pytest.mark.parametrize("kw,match", [
    (dict(global_pool="max"), "global_pool='max'"),
    (dict(global_pool="avgmax"), "global_pool='avgmax'"),
    (dict(global_pool="map"), "global_pool='map'"),
    (dict(pre_norm=True), "pre_norm"),
    (dict(final_norm=False), "final_norm=False"),
    (dict(norm_layer="rmsnorm"), "RmsNorm|norm layer"),
    (dict(scale_attn_norm=True), "scale_attn_norm"),
    (dict(scale_mlp_norm=True), "scale_mlp_norm"),
    (dict(num_classes=0), "num_classes=0"),
])
def test_timm_variants_that_are_not_exact_are_refused_by_name(kw, match):
    with torch.device("meta"):
        model = _timm_from_kwargs({**dict(img_size=8, patch_size=4, in_chans=1, num_classes=3, embed_dim=16,
                                          depth=1, num_heads=2), **kw})
    with pytest.raises(UnsupportedModel, match=match):
        adapter_for(model)


def test_timm_mlp_layer_swiglu_is_refused():
    from timm.layers import SwiGLUPacked

    with torch.device("meta"):
        model = _timm_from_kwargs(dict(img_size=8, patch_size=4, in_chans=1, num_classes=3, embed_dim=16, depth=1,
                                       num_heads=2))
        model.blocks[0].mlp = SwiGLUPacked(16, 32)
    with pytest.raises(UnsupportedModel, match="MLP"):
        adapter_for(model)


def test_hf_variants_that_are_not_exact_are_refused_by_name():
    from transformers import ViTConfig, ViTForImageClassification, ViTModel

    shape = dict(image_size=8, patch_size=4, num_channels=1, hidden_size=16, num_hidden_layers=1,
                 num_attention_heads=2, intermediate_size=16)
    cfg = ViTConfig(**shape)
    with pytest.raises(UnsupportedModel, match="num_labels=0"):
        adapter_for(ViTForImageClassification(ViTConfig(**shape, num_labels=0)))
    with pytest.raises(UnsupportedModel, match="activation"):
        adapter_for(ViTForImageClassification(ViTConfig(**shape, hidden_act="prelu")))
    with pytest.raises(UnsupportedModel, match="without a pooler"):
        adapter_for(ViTModel(cfg, add_pooling_layer=False))
    with pytest.raises(UnsupportedModel, match="mask token"):
        adapter_for(ViTModel(cfg, use_mask_token=True))


def test_timm_model_built_outside_glmc_is_rebuilt_and_saved(tmp_path):
    """No glmc_timm_kwargs attached: the constructor arguments (eps included) are inferred from the modules."""
    import functools

    from timm.layers import LayerNorm
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    model = perturb_vit(VisionTransformer(img_size=8, patch_size=4, in_chans=1, num_classes=3, embed_dim=24, depth=2,
                                      num_heads=3, mlp_ratio=2.0, global_pool="avg", reg_tokens=1, no_embed_class=True,
                                      init_values=0.3, act_layer="gelu_tanh", proj_bias=False,
                                      norm_layer=functools.partial(LayerNorm, eps=1e-5)))
    assert not hasattr(model, "glmc_timm_kwargs")
    checks = verify_model(model)
    assert all(c.ok for c in checks), checks
    save_model(model, tmp_path / "m")
    again, _ = load_model(tmp_path / "m")
    assert _state_equal(model, again) and again.blocks[0].norm1.eps == 1e-5 and again.fc_norm.eps == 1e-5
    assert _max_diff(model, again, probe_inputs(model)) == 0.0
