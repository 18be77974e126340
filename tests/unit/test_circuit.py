"""The paper's circuit form beyond the conformance suite (which checks its logits for every family): timm's
average pooling, invariance to per-head maps, save/load, a refusal by name, CLI mode."""


import pytest
import torch

from factories import timm_vit, tiny_gpt2
from glmc.adapters import adapter_for
from glmc.invariance import probe_inputs
from glmc.symmetry.random import random_class_element
from glmc.view.circuit import CircuitModel, circuit_model, circuit_params, parameter_count
from glmc.view.model_ops import canonical_view, logits


def test_timm_average_pooling_circuit_form_reproduces_logits():
    """Average pooling with a class token (the conformance suite checks the circuit form of every other layout)."""
    model = timm_vit(in_chans=1, num_classes=3, embed_dim=32, num_heads=4, global_pool="avg")
    x = torch.randn(3, 1, 8, 8)
    with torch.no_grad():
        diff = (logits(model, x) - circuit_model(model)(pixel_values=x)).abs().max()
    assert float(diff) <= 1e-4


def test_circuits_absorb_per_head_invertible_maps():
    model = tiny_gpt2()
    view, adapter = canonical_view(model)
    arch = adapter.arch(model)
    gen = torch.Generator().manual_seed(0)
    t = random_class_element("qk", arch, gen).then(random_class_element("ov", arch, gen), arch)
    a, b = circuit_params(view, arch.n_layer), circuit_params(t.apply(view, arch), arch.n_layer)
    assert (view["blocks.0.attn.q.w"] - t.apply(view, arch)["blocks.0.attn.q.w"]).abs().max() > 0.1
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-4), k
    assert parameter_count(a) > sum(v.numel() for v in view.values())  # circuits are larger than the native model


def test_circuit_model_save_load(tmp_path):
    model = tiny_gpt2()
    c = circuit_model(model)
    c.save(tmp_path / "c")
    again = CircuitModel.load(tmp_path / "c")
    x = probe_inputs(model)
    assert torch.equal(c(input_ids=x), again(input_ids=x))


def test_refused_variant_is_named():
    import timm.models.vision_transformer as tv

    from glmc.adapters import UnsupportedModel

    m = tv.VisionTransformer(img_size=8, patch_size=4, in_chans=1, num_classes=3, embed_dim=32, depth=1,
                             num_heads=4, reg_tokens=2)
    with pytest.raises(UnsupportedModel, match="register"):
        adapter_for(m).io_spec(m)
