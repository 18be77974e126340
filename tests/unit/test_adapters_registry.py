"""The adapter registry: by model, by family name, by checkpoint directory; forward dispatch on a batch; the
name map read both ways."""

import json

import pytest
import torch

from factories import SHAPES  # one small shape per registered family
from glmc.adapters import FAMILIES, UnsupportedModel, adapter_for, adapter_for_dir, adapter_named, forward
from glmc.models import build_model, load_model, save_model
from glmc.tasks import task


def test_every_family_is_named_and_claims_only_its_own_directories(tmp_path):
    assert set(FAMILIES) == set(SHAPES)
    for family, shape in SHAPES.items():
        torch.manual_seed(0)
        model = build_model(family, **shape)
        assert adapter_for(model).family == adapter_named(family).family == family
        save_model(model, tmp_path / family)
    for family in SHAPES:
        assert adapter_for_dir(tmp_path / family).family == family
        claimed = [f for f in SHAPES if type(adapter_named(f)).checkpoint.claims(tmp_path / family)]
        assert claimed == [family]
    with pytest.raises(UnsupportedModel, match="unknown model family 'falcon'"):
        adapter_named("falcon")
    with pytest.raises(UnsupportedModel, match="no glmc adapter"):
        adapter_for(torch.nn.Linear(2, 2))


def test_directories_no_adapter_claims_are_refused_by_what_they_hold(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        adapter_for_dir(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="empty"):
        adapter_for_dir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "falcon"}))
    with pytest.raises(UnsupportedModel, match="config.json"):
        adapter_for_dir(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="invalid config.json"):
        adapter_for_dir(tmp_path)


@torch.no_grad()
def test_forward_maps_a_data_batch_to_each_native_call():
    gen = torch.Generator().manual_seed(0)
    for family, shape in SHAPES.items():
        torch.manual_seed(0)
        model = build_model(family, **shape).eval()
        adapter = adapter_for(model)
        x = adapter.probe_inputs(model, n=3, seq=5, gen=gen)
        record = task(adapter.task)
        batch = {record.input_key: x, record.target_key: torch.zeros(3).long()}
        out = forward(model, batch)
        classes = shape.get("num_classes", shape.get("vocab_size"))
        assert out.shape == ((3, 5, classes) if adapter.task in ("lm", "mlm") else (3, classes))
        # substituted parameters are used (zeroed head: constant logits), and the model keeps its own
        view = adapter.to_canonical(model)
        view.update({k: torch.zeros_like(view[k]) for k in ("head.w", "head.b", "mlm_head.w", "mlm_head.b")
                     if k in view})
        zeroed = forward(model, batch, adapter.native_state(view, model))
        assert float(zeroed.std(-1).max()) < 1e-6 < float(out.std(-1).max())
        assert torch.equal(forward(model, batch), out)


def test_hf_vit_model_with_pooler_loads_as_itself(tmp_path):
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    model = ViTModel(ViTConfig(image_size=8, patch_size=4, num_channels=1, hidden_size=16, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=24)).eval()
    save_model(model, tmp_path / "m")
    again, _ = load_model(tmp_path / "m")
    assert type(again) is ViTModel
    x = adapter_for(model).probe_inputs(model)
    assert torch.equal(forward(model, {"pixel_values": x}), forward(again, {"pixel_values": x}))


def test_native_state_is_the_inverse_of_to_canonical_and_differentiable():
    torch.manual_seed(0)
    model = build_model("gpt2", **SHAPES["gpt2"])
    adapter = adapter_for(model)
    view = {k: v.clone().requires_grad_(True) for k, v in adapter.to_canonical(model).items()}
    state = adapter.native_state(view, model)
    native = model.state_dict()
    assert all(torch.equal(state[k], native[k]) for k in state) and set(state) <= set(native)
    sum(t.sum() for t in state.values()).backward()
    assert all(v.grad is not None for v in view.values())
