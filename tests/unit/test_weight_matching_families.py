"""Weight matching exactly recovers a random symmetry (residual rotation, head and unit permutations, per-head
invertible maps) for every model family."""

import pytest
import torch

from conftest import tiny_gpt2
from glmc.adapters import adapter_for
from glmc.matching import align
from glmc.paths.barrier import barrier_metrics, path_curve
from glmc.symmetry.random import random_full_transform
from glmc.view.model_ops import transform_model


def _perturbed(model):
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n or "ln_" in n:
                p.add_(torch.randn_like(p) * 0.3)
            elif p.ndim >= 2:
                p.mul_(3.0)
    return model.eval()


def _models():
    import timm.models.vision_transformer as tv
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    yield "gpt2", tiny_gpt2(n_layer=2), {"input_ids": None}
    hf = ViTForImageClassification(ViTConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                             intermediate_size=64, image_size=8, patch_size=4, num_channels=1,
                                             num_labels=5))
    yield "hf-vit", _perturbed(hf), {"pixel_values": None}
    timm = tv.VisionTransformer(img_size=8, patch_size=4, in_chans=1, num_classes=5, embed_dim=32, depth=2,
                                num_heads=4, mlp_ratio=2, init_values=0.5)
    yield "timm-vit", _perturbed(timm), {"pixel_values": None}


@pytest.mark.parametrize("name,model,kind", list(_models()), ids=lambda x: x if isinstance(x, str) else "")
def test_weight_matching_recovers_a_random_symmetry(name, model, kind):
    gen = torch.Generator().manual_seed(3)
    moved = transform_model(model, random_full_transform(adapter_for(model).arch(model), gen))
    al = align(model, moved, "weight", iterations=5, progress=False)
    assert al.report["distance_before"] > 0.1
    assert al.report["distance_after"] < 1e-8, al.report["iterations"]
    if "input_ids" in kind:
        x = torch.randint(0, model.config.vocab_size, (4, 33), generator=gen)
        batches = [{"input_ids": x[:, :-1], "targets": x[:, 1:]}]
        task = "lm"
    else:
        batches = [{"pixel_values": torch.randn(16, 1, 8, 8, generator=gen), "labels": torch.arange(16) % 5}]
        task = "cls"
    vanilla = barrier_metrics(path_curve([model, moved], batches, task, 5, progress=False))
    matched = barrier_metrics(path_curve([al.model_a, al.model_b], batches, task, 5, progress=False))
    assert matched["loss_barrier"] <= 1e-4 and matched["acc_drop"] <= 1e-9
    assert max(abs(a - b) for a, b in zip(vanilla["loss_endpoints"], matched["loss_endpoints"])) <= 1e-4
