"""Post-LN encoders (glmc/adapters/bert.py, docs/encoders.md): what survives norms on the stream and what does not,
the masked-LM data and refusals (aligned / merged encoders through the CLI: tests/e2e/test_encoders_end_to_end.py)."""

import pytest
import torch

from factories import bert, roberta
from glmc.adapters import UnsupportedModel, adapter_for
from glmc.adapters.bert import max_tokens
from glmc.invariance import probe_inputs
from glmc.symmetry.declarations import NormSpec, residual_bound
from glmc.symmetry.elements import LinearMap
from glmc.symmetry.kinds import kind
from glmc.symmetry.transform import Transform
from glmc.view.canonical import canonicalise
from glmc.view.model_ops import logits


def moved(model, residual: torch.Tensor, bias_moves: bool = True):
    """`model` with the residual map `residual` (a d×d matrix) applied to its canonical view; with `bias_moves`
    False the stream norms' biases are put back afterwards (as if they were not residual tensors)."""
    adapter = adapter_for(model)
    arch = adapter.arch(model)
    view = canonicalise(adapter.to_canonical(model), arch)
    out = Transform({"residual": LinearMap(residual.double())}).apply(view, arch)
    if not bias_moves:
        for k in out:
            if k.endswith(("ln1.b", "ln2.b")) or k == "embed_ln.b":
                out[k] = view[k]
    return adapter.from_canonical(out, model)


def change(model, other) -> float:
    x = probe_inputs(model)
    return float((logits(model, x) - logits(other, x)).abs().max())


@pytest.mark.parametrize("make", [bert(), bert(tied=False), roberta()], ids=["bert-tied", "bert-untied", "roberta"])
def test_the_global_sign_survives_post_ln_and_nothing_more(make):
    model = make(0)
    d = model.config.hidden_size
    eye = torch.eye(d, dtype=torch.float64)
    perm = eye[:, torch.randperm(d, generator=torch.Generator().manual_seed(0))]
    # −P: the stream negated, every LayerNorm bias on the stream with it (its gain moved by P alone)
    assert change(model, moved(model, -perm)) <= 1e-4
    # the same map with the biases left in place is not a symmetry: LN(−x) = −n(x)·γ + β
    assert change(model, moved(model, -perm, bias_moves=False)) > 1e-2
    # a sign on some coordinates only changes the LayerNorm's mean
    signs = torch.ones(d, dtype=torch.float64)
    signs[: d // 2] = -1
    assert change(model, moved(model, perm * signs)) > 1e-2
    # an orthogonal map fixing the all-ones direction (the pre-LN group) mixes coordinates the gains scale apart
    rot = kind("orthogonal-fixing-ones").random(d, None, torch.Generator().manual_seed(1)).matrix
    assert change(model, moved(model, rot)) > 1e-2


def test_residual_bound_follows_the_norms_on_the_stream():
    assert residual_bound({"blocks.{i}.ln1": NormSpec("layernorm", "w", "input")}) is None
    assert residual_bound({"embed_ln": NormSpec("layernorm", "w", "stream")}) == "sign-permutation"
    # sandwich RMS norms on the sublayers' outputs: RMS is odd per coordinate
    assert residual_bound({"blocks.{i}.post_attn": NormSpec("rmsnorm", "w", "output")}) == "signed-permutation"


def test_a_declared_residual_group_larger_than_the_norms_allow_is_refused():
    from dataclasses import replace

    model = bert()(0)
    adapter = adapter_for(model)
    arch = adapter.arch(model)
    arch.groups = {**arch.groups, "residual": replace(arch.groups["residual"], kind="orthogonal")}
    with pytest.raises(UnsupportedModel, match="leaves only sign-permutation"):
        canonicalise(adapter.to_canonical(model), arch)


def test_post_ln_views_are_neither_folded_nor_centred():
    model = bert()(0)
    adapter = adapter_for(model)
    arch = adapter.arch(model)
    assert not arch.centred_stream
    view = adapter.to_canonical(model)
    canon = canonicalise(view, arch)
    assert all(torch.equal(view[k], canon[k]) for k in view)


def test_other_encoder_heads_and_relative_positions_are_refused_by_name():
    from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification

    cfg = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=20)
    with pytest.raises(UnsupportedModel, match="BertForSequenceClassification"):
        adapter_for(BertForSequenceClassification(cfg))
    cfg.position_embedding_type = "relative_key"
    with pytest.raises(UnsupportedModel, match="relative_key"):
        adapter_for(BertForMaskedLM(cfg))


def test_the_pooler_group_is_checked_on_the_next_sentence_logits():
    from glmc.invariance import side_outputs

    model = bert(pretraining=True)(0)
    arch = adapter_for(model).arch(model)
    x = probe_inputs(model)
    ref = side_outputs(model, x)["nsp"]
    adapter = adapter_for(model)
    view = adapter.to_canonical(model)
    element = kind("signed-permutation").random(arch.d_model, None, torch.Generator().manual_seed(2))
    good = adapter.from_canonical(Transform({"pooler": element}).apply(view, arch), model)
    assert float((side_outputs(good, x)["nsp"] - ref).abs().max()) <= 1e-4
    # the pooler moved without its reader: the masked-LM logits cannot see it, the next-sentence logits do
    bad = dict(view, **{"pooler.w": element.act(view["pooler.w"], 0, "co")})
    broken = adapter.from_canonical(bad, model)
    assert change(model, broken) == 0.0
    assert float((side_outputs(broken, x)["nsp"] - ref).abs().max()) > 1e-3


# ---------------------------------------------------------------------------------------------- masked-LM data


@pytest.mark.parametrize("style,tokenizer", [("bert", "wordpiece:120"), ("roberta", "bpe:320")])
def test_mlm_batches_mask_the_same_positions_every_time(mlm_text_file, style, tokenizer):
    import glmc.data
    from glmc.data.mlm import IGNORE_INDEX

    ds = glmc.data.load({"task": "mlm", "source": f"text:{mlm_text_file}", "tokenizer": tokenizer, "context": 24,
                         "style": style, "split": {"train": 0.8, "val": 0.1, "test": 0.1}})
    assert ds.task == "mlm" and ds.pad_id == (0 if style == "bert" else 1)
    first = list(ds.batches("train", 8, shuffle=False))
    again = list(ds.batches("train", 8, shuffle=False))
    assert all(torch.equal(a[k], b[k]) for a, b in zip(first, again) for k in a)
    ids, attention = ds.blocks("train")
    assert (ids[:, 0] == ds.cls_id).all()
    assert (ids.gather(1, (attention.sum(1, keepdim=True) - 1)) == ds.sep_id).all()
    assert ((ids == ds.pad_id) == (attention == 0)).all()
    chosen = total = 0
    kinds = torch.zeros(3)
    for batch in first:
        target = batch["masked_targets"]
        picked = target != IGNORE_INDEX
        special = torch.isin(batch["input_ids"], ds.special) & (batch["input_ids"] != ds.mask_id)
        assert not (picked & special).any() and not (picked & (batch["attention_mask"] == 0)).any()
        assert (batch["token_type_ids"] == 0).all()
        inputs = batch["input_ids"][picked]
        kinds += torch.tensor([(inputs == ds.mask_id).sum(), (inputs == target[picked]).sum(), 0.0])
        chosen += int(picked.sum())
        original = torch.where(picked, target, batch["input_ids"])
        total += int(((batch["attention_mask"] > 0) & ~torch.isin(original, ds.special)).sum())
    assert 0.10 < chosen / total < 0.20
    assert 0.7 < kinds[0] / chosen < 0.9 and 0.03 < kinds[1] / chosen < 0.2  # 80 % [MASK]; ≈10 % kept (+ chance)
    # another training epoch (seed) draws other masks
    other = next(iter(ds.batches("train", 8, seed=1)))
    assert not torch.equal(other["masked_targets"], first[0]["masked_targets"])


def test_an_encoder_trains_on_its_blocks_and_reports_the_masked_loss(mlm_text_file):
    import glmc.data
    from glmc.adapters import adapter_named
    from glmc.models.evaluate import evaluate

    for family, tokenizer in (("bert", "wordpiece:120"), ("roberta", "bpe:320")):
        ds = glmc.data.load({"task": "mlm", "source": f"text:{mlm_text_file}", "tokenizer": tokenizer, "context": 24,
                             "style": family})
        adapter = adapter_named(family)
        torch.manual_seed(0)
        model = adapter.build(**adapter.training.data_shape(ds), layers=1, width=16, heads=2, mlp=24)
        assert max_tokens(model) == 24  # RoBERTa: two more positions, up to and at the padding index
        result = evaluate(model, ds.batches("test", 4))
        picked = sum(int((b["masked_targets"] != -100).sum()) for b in ds.batches("test", 4))
        assert result["n"] == picked and 3.0 < result["loss"] < 8.0



# ---------------------------------------------------------------------------------------------- the new pieces

def test_sign_permutations_are_found_with_their_sign_and_gains_move_without_it():
    from glmc.symmetry.elements import DenseMap, IndexMap, PermutationDenseMap

    gen = torch.Generator().manual_seed(3)
    k = kind("sign-permutation")
    for sign in (1.0, -1.0):
        p = torch.eye(6, dtype=torch.float64)[:, torch.randperm(6, generator=gen)] * sign
        found = k.nearest(2.0 * p + 0.1 * torch.rand(6, 6, generator=gen, dtype=torch.float64)).matrix
        assert torch.equal(found, p)
    for _ in range(8):  # random elements carry one sign for every coordinate
        m = k.random(5, None, gen).matrix
        assert len(set(m[m != 0].tolist())) == 1
    gain = torch.rand(4, 6, generator=gen, dtype=torch.float64) + 0.5
    p = torch.eye(6, dtype=torch.float64)[:, torch.randperm(6, generator=gen)]
    assert torch.equal(LinearMap(-p).act(gain, -1, "gain"), gain @ p)
    assert torch.equal(IndexMap(p.argmax(0)).act(gain, -1, "gain"), gain @ p)
    assert torch.allclose(DenseMap(-p).act(gain, -1, "gain"), gain @ p)
    # learned matching's straight-through form: the same values, and a gradient into every latent entry
    z = (-p + 0.01 * torch.rand(6, 6, generator=gen, dtype=torch.float64)).requires_grad_(True)
    hard = kind("sign-permutation").project(z)
    out = PermutationDenseMap(hard).act(gain, -1, "gain")
    assert torch.allclose(out, gain @ p)
    out.sum().backward()
    assert z.grad is not None and bool((z.grad != 0).all())
