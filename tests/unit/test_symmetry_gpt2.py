"""GPT-2 symmetry checks beyond the conformance suite (tests/conformance/adapter_suite.py): a three-layer model,
the checker catching a wrong rule, negative controls, unit splitting, widening, transform files with a split,
group elements on their own and a refusal by name."""

import pytest
import torch

from factories import tiny_gpt2
from glmc.adapters import UnsupportedModel, adapter_for
from glmc.invariance import probe_inputs, verify_model
from glmc.symmetry import spec
from glmc.symmetry.elements import IndexMap, LinearMap
from glmc.symmetry.kinds import kind
from glmc.symmetry.random import exact_classes, random_class_element, random_full_transform
from glmc.symmetry.transform import Transform
from glmc.view.model_ops import canonical_model, logits, transform_model, widen_model
from glmc.view.widen import residual_embedding

TOL = 1e-4


def _max_diff(a, b, x):
    return float((logits(a, x) - logits(b, x)).abs().max())


@pytest.mark.parametrize("seed", [0, 1])
def test_every_class_keeps_the_logits_of_a_three_layer_model(seed):
    """A middle layer (neither the first nor the last): the conformance configs stop at two layers."""
    model = tiny_gpt2(3, 24, 3, None, "gelu", True, seed=seed)
    checks = verify_model(model, seed=seed)
    assert {"canonical", "residual", "heads", "qk", "ov", "mlp", "rectangular", "composed"} <= {c.name for c in checks}
    for c in checks:
        assert c.max_dlogits <= TOL and c.dloss <= TOL, c


def test_wrong_transform_is_caught(monkeypatch):
    """W_K·A instead of W_K·A^-T must be reported by the checker."""
    model = tiny_gpt2()
    wrong = [(g, k, a, "co" if g == "qk" and ".attn.k." in k else m, b) for g, k, a, m, b in spec.ROWS]
    monkeypatch.setattr(spec, "ROWS", wrong)
    checks = {c.name: c for c in verify_model(model, classes=["qk"])}
    assert not checks["qk"].ok and checks["qk"].max_dlogits > 1e-2


def test_residual_map_needs_the_ones_direction_fixed():
    """A general rotation (not fixing 1) breaks LayerNorm; the ones-fixing one does not."""
    model = canonical_model(tiny_gpt2())
    x = probe_inputs(model)
    d = model.config.n_embd
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    bad = transform_model(model, Transform({"residual": LinearMap(q)}), canonicalise_first=False)
    good = transform_model(
        model, Transform({"residual": kind("orthogonal-fixing-ones").random(d, None, torch.Generator())})
    )
    assert _max_diff(model, bad, x) > 1e-2
    assert _max_diff(model, good, x) <= TOL


def test_semi_permutation_is_refused_for_gelu_but_exact_for_relu():
    gelu, relu = tiny_gpt2(activation="gelu_new"), tiny_gpt2(activation="relu")
    assert "mlp:semi-permutation" not in exact_classes(adapter_for(gelu).arch(gelu))
    arch = adapter_for(relu).arch(relu)
    split = transform_model(relu, random_class_element("mlp-split", arch, torch.Generator().manual_seed(1)))
    assert split.config.n_inner == arch.d_mlp + arch.d_mlp // 2
    assert _max_diff(relu, split, probe_inputs(relu)) <= TOL


def test_widened_model_is_a_valid_wider_checkpoint(tmp_path):
    from transformers import GPT2LMHeadModel

    model = tiny_gpt2(n_embd=32, n_head=4)
    o = residual_embedding(adapter_for(model).arch(model), 64, torch.Generator().manual_seed(0))
    wide = widen_model(model, 64, n_head=8, d_mlp=160, o=o)
    assert (wide.config.n_embd, wide.config.n_head, wide.config.n_inner) == (64, 8, 160)
    assert wide.config.layer_norm_epsilon == pytest.approx(model.config.layer_norm_epsilon / 2)
    wide.save_pretrained(tmp_path)
    again = GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    assert _max_diff(model, again, probe_inputs(model)) <= TOL


def test_transform_save_load_round_trip(tmp_path):
    model = tiny_gpt2(activation="relu")
    arch = adapter_for(model).arch(model)
    gen = torch.Generator().manual_seed(2)
    t = random_full_transform(arch, gen).then(random_class_element("mlp-split", arch, gen), arch)
    t.save(tmp_path / "t.safetensors")
    back = Transform.load(tmp_path / "t.safetensors")
    assert back.describe() == t.describe()
    x = probe_inputs(model)
    assert _max_diff(transform_model(model, t), transform_model(model, back), x) == 0.0


def test_group_elements_compose_and_invert():
    gen = torch.Generator().manual_seed(0)
    p1, p2 = IndexMap(torch.randperm(7, generator=gen)), IndexMap(torch.randperm(7, generator=gen))
    x = torch.randn(3, 7)
    assert torch.equal(p1.then(p2).act(x, 1, "co"), p2.act(p1.act(x, 1, "co"), 1, "co"))
    assert torch.equal(p1.inverse().act(p1.act(x, 1, "co"), 1, "co"), x)
    a = kind("invertible").random(5, 3, gen)
    y = torch.randn(3, 5, 4)
    assert torch.allclose(a.inverse().act(a.act(y, 1, "co", 0), 1, "co", 0), y, atol=1e-5)
    # co and contra actions are dual: <co(u), contra(v)> = <u, v>
    u, v = torch.randn(3, 5, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)
    lhs = (a.act(u[:, :, None], 1, "co", 0) * a.act(v[:, :, None], 1, "contra", 0)).sum()
    assert torch.allclose(lhs, (u * v).sum())


def test_unsupported_variant_is_refused_by_name():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=16,
                                       add_cross_attention=True, bos_token_id=0, eos_token_id=0))
    with pytest.raises(UnsupportedModel, match="cross-attention"):
        adapter_for(model)
    with pytest.raises(UnsupportedModel, match="no glmc adapter"):
        adapter_for(torch.nn.Linear(2, 2))


