"""The core invariant on HF GPT-2: every symmetry transform keeps the function."""

import itertools

import pytest
import torch

from conftest import tiny_gpt2
from glmc.adapters import UnsupportedModel, adapter_for
from glmc.invariance import probe_inputs, verify_model
from glmc.symmetry import spec
from glmc.symmetry.elements import IndexMap, LinearMap
from glmc.symmetry.kinds import kind
from glmc.symmetry.random import exact_classes, random_class_element, random_full_transform
from glmc.symmetry.transform import Transform
from glmc.view.canonical import canonicalise, is_canonical
from glmc.view.model_ops import canonical_model, logits, transform_model, widen_model
from glmc.view.widen import residual_embedding

CONFIGS = [  # (n_layer, n_embd, n_head, n_inner, activation, tied)
    (1, 16, 2, None, "gelu_new", True),
    (2, 32, 4, 48, "relu", False),
    (3, 24, 3, 40, "gelu", True),
    (2, 32, 8, None, "relu", True),
]
TOL = 1e-4


def _max_diff(a, b, x):
    return float((logits(a, x) - logits(b, x)).abs().max())


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"L{c[0]}d{c[1]}h{c[2]}-{c[4]}-{'tied' if c[5] else 'untied'}")
def test_round_trip_is_bit_exact(cfg):
    model = tiny_gpt2(*cfg)
    adapter = adapter_for(model)
    rebuilt = adapter.from_canonical(adapter.to_canonical(model), model)
    a, b = model.state_dict(), rebuilt.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert rebuilt.config.tie_word_embeddings == cfg[5]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"L{c[0]}d{c[1]}h{c[2]}-{c[4]}")
@pytest.mark.parametrize("seed", [0, 1])
def test_every_class_alone_and_composed_keeps_logits(cfg, seed):
    model = tiny_gpt2(*cfg, seed=seed)
    checks = verify_model(model, seed=seed)
    names = {c.name for c in checks}
    assert {"canonical", "residual", "residual:permutation", "heads", "qk", "ov", "mlp", "rectangular",
            "composed"} <= names
    assert ("mlp:semi-permutation" in names) == (cfg[4] == "relu")
    for c in checks:
        assert c.max_dlogits <= TOL and c.dloss <= TOL, c


def test_canonical_model_is_standard_and_canonical():
    model = tiny_gpt2()
    canon = canonical_model(model)
    adapter = adapter_for(canon)
    view = adapter.to_canonical(canon)
    arch = adapter.arch(canon)
    assert is_canonical(view, arch)
    assert not is_canonical(adapter.to_canonical(model), arch)
    # folding the final LayerNorm gain into the LM head unties it from the embedding
    assert canon.config.tie_word_embeddings is False
    assert all(torch.all(p == 1) for n, p in canon.named_parameters() if n.endswith(("ln_1.weight", "ln_2.weight")))


def test_transformed_model_moves_weights_but_not_function():
    model = canonical_model(tiny_gpt2())
    t = random_full_transform(adapter_for(model).arch(model), torch.Generator().manual_seed(3))
    moved = transform_model(model, t)
    x = probe_inputs(model)
    assert _max_diff(model, moved, x) <= TOL
    w0 = model.transformer.h[0].attn.c_attn.weight
    w1 = moved.transformer.h[0].attn.c_attn.weight
    assert (w0 - w1).abs().max() > 0.1  # the symmetry really moved the weights


def test_inverse_restores_weights():
    model = canonical_model(tiny_gpt2())
    t = random_full_transform(adapter_for(model).arch(model), torch.Generator().manual_seed(4))
    back = transform_model(transform_model(model, t), t.inverse(adapter_for(model).arch(model)),
                           canonicalise_first=False)
    for (k, a), b in zip(model.state_dict().items(), back.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-4), k


def test_composition_matches_sequential_application():
    model = canonical_model(tiny_gpt2())
    arch = adapter_for(model).arch(model)
    gen = torch.Generator().manual_seed(5)
    t1, t2 = random_full_transform(arch, gen), random_full_transform(arch, gen)
    seq = transform_model(transform_model(model, t1), t2, canonicalise_first=False)
    once = transform_model(model, t1.then(t2, arch), canonicalise_first=False)
    for (k, a), b in zip(seq.state_dict().items(), once.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-4), k


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


def test_saved_outputs_reload_with_from_pretrained(tmp_path):
    from transformers import GPT2LMHeadModel

    model = tiny_gpt2(tied=True)
    moved = transform_model(model, random_full_transform(adapter_for(model).arch(model), torch.Generator()))
    moved.save_pretrained(tmp_path)
    again = GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    x = probe_inputs(model)
    assert _max_diff(moved, again, x) == 0.0
    assert _max_diff(model, again, x) <= TOL


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


def test_canonicalise_does_not_modify_its_input():
    model = tiny_gpt2()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    view = adapter_for(model).to_canonical(model)
    snapshot = {k: v.clone() for k, v in view.items()}
    canonicalise(view, adapter_for(model).arch(model))
    transform_model(model, random_full_transform(adapter_for(model).arch(model), torch.Generator()))
    assert all(torch.equal(view[k], snapshot[k]) for k in view)
    assert all(torch.equal(model.state_dict()[k], before[k]) for k in before)


@pytest.mark.parametrize("a,b", list(itertools.combinations(["heads", "qk", "ov", "mlp", "orthogonal"], 2)))
def test_pairs_of_classes_compose(a, b):
    model = canonical_model(tiny_gpt2(n_layer=1))
    arch = adapter_for(model).arch(model)
    gen = torch.Generator().manual_seed(7)
    t = random_class_element(a, arch, gen).then(random_class_element(b, arch, gen), arch)
    assert _max_diff(model, transform_model(model, t), probe_inputs(model)) <= TOL
