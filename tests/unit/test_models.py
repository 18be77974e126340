"""glmc.models: formats, atomic writes and the errors users see."""

import json

import pytest
import torch

from glmc.models import build_model, family_of, load_model, save_model, timm_kwargs

VIT = dict(image_size=8, patch=4, channels=1, num_classes=3, layers=1, width=16, heads=2, mlp=32)


@pytest.mark.parametrize("family,shape", [
    ("gpt2", dict(vocab_size=50, context=16, layers=1, width=16, heads=2, mlp=32, tied=False, activation="relu")),
    ("hf-vit", VIT),
    ("timm-vit", dict(VIT, activation="relu")),
])
def test_save_load_round_trip(family, shape, tmp_path):
    torch.manual_seed(0)
    model = build_model(family, **shape)
    save_model(model, tmp_path / "m", record={"note": "x"})
    again, record = load_model(tmp_path / "m")
    assert record == {"note": "x"} and family_of(again) == family and not again.training
    sa, sb = model.state_dict(), again.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_timm_kwargs_are_inferred_when_not_attached():
    model = build_model("timm-vit", **VIT)
    attached = model.glmc_timm_kwargs
    del model.glmc_timm_kwargs
    inferred = timm_kwargs(model)
    assert inferred["embed_dim"] == attached["embed_dim"] and inferred["mlp_ratio"] == attached["mlp_ratio"]


def test_failed_save_leaves_nothing_and_existing_dirs_are_kept(tmp_path):
    model = build_model("hf-vit", **VIT)
    with pytest.raises(TypeError):
        save_model(model, tmp_path / "m", record={"bad": object()})  # not JSON: fails mid-write
    assert list(tmp_path.iterdir()) == []
    save_model(model, tmp_path / "m")
    with pytest.raises(FileExistsError):
        save_model(model, tmp_path / "m", overwrite=False)


def test_load_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_model(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(ValueError, match=r"torch.load\(weights_only=True\), which rebuilds only tensors, refuses"):
        load_model(tmp_path)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="divisible"):
        build_model("gpt2", vocab_size=10, context=8, layers=1, width=10, heads=3, mlp=8)
    with pytest.raises(ValueError, match="patch"):
        build_model("hf-vit", **dict(VIT, patch=3))
    with pytest.raises(ValueError, match="family"):
        build_model("falcon")
