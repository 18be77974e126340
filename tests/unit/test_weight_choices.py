"""The weight-matching choices (issue #15): each keeps the planted-symmetry recovery exact, and each computes
what it claims."""

from types import SimpleNamespace

import pytest
import torch

from factories import tiny_gpt2
from glmc.adapters import adapter_for
from glmc.errors import BadOption
from glmc.matching import align
from glmc.matching.heads import score_keys
from glmc.matching.mlp_units import signature_similarity, unit_signatures
from glmc.matching.residual_fit import seen_token_rows
from glmc.symmetry.random import random_full_transform
from glmc.symmetry.spec import transformer_groups
from glmc.symmetry.structure import structure
from glmc.view.model_ops import transform_model


def test_score_keys_leave_every_attention_pattern_unchanged():
    gen = torch.Generator().manual_seed(0)
    h, k, d, t = 3, 4, 8, 5
    q, key = torch.randn(h, k, d + 1, generator=gen, dtype=torch.float64), torch.randn(h, k, d + 1, generator=gen,
                                                                                        dtype=torch.float64)
    x = torch.randn(t, d, generator=gen, dtype=torch.float64)
    x = x - x.mean(-1, keepdim=True)  # behind a LayerNorm the stream sums to zero
    xh = torch.cat([x, torch.ones(t, 1, dtype=torch.float64)], -1)

    def pattern(kf):
        return torch.softmax(torch.einsum("td,hkd,hke,se->hts", xh, q, kf, xh), -1)

    reduced = score_keys(key, centred_stream=True)
    assert torch.allclose(pattern(key), pattern(reduced), atol=1e-12)
    assert reduced[..., -1].abs().max() == 0 and reduced[..., :-1].sum(-1).abs().max() < 1e-12
    assert not torch.allclose(pattern(key), pattern(torch.randn_like(key)))  # the check can fail


def test_seen_token_rows_mark_exactly_the_training_tokens():
    view = {"embed": torch.zeros(10, 4)}
    data = SimpleNamespace(tokens={"train": torch.tensor([[1, 3], [3, 7]])})
    assert seen_token_rows(data, view)["embed"].nonzero().flatten().tolist() == [1, 3, 7]
    assert seen_token_rows(SimpleNamespace(), view) == {}  # image data: no token rows


def test_signature_similarities_rank_a_unit_first_against_its_own_copy():
    gen = torch.Generator().manual_seed(1)
    view = {"blocks.0.mlp.in.w": torch.randn(6, 4, generator=gen), "blocks.0.mlp.in.b": torch.randn(6, generator=gen),
            "blocks.0.mlp.out.w": torch.randn(6, 4, generator=gen)}
    perm = torch.randperm(6, generator=gen)
    moved = {k: v[perm] * 2.0 for k, v in view.items()}  # a uniform scale: signatures are normalised
    units = structure(transformer_groups(4, 1, 4, 6, relu=False)).units
    assert torch.allclose(unit_signatures(view, units, 0).norm(dim=-1), torch.ones(6))
    for kind_name in ("cosine", "l1"):
        s = signature_similarity(view, moved, units, 0, kind_name)
        assert s.argmax(1).tolist() == perm.argsort().tolist()


@pytest.mark.parametrize("options", [dict(centred_keys=True), dict(unit_similarity="cosine"),
                                     dict(unit_similarity="l1"), dict(seen_tokens=True), dict(weighting="rows"),
                                     dict(weighting="none")], ids=str)
def test_every_choice_still_recovers_a_planted_symmetry(options):
    torch.manual_seed(0)
    model = tiny_gpt2(n_layer=2).eval()
    gen = torch.Generator().manual_seed(3)
    moved = transform_model(model, random_full_transform(adapter_for(model).arch(model), gen))
    data = SimpleNamespace(tokens={"train": torch.arange(0, model.config.vocab_size, 2)})  # half the vocabulary
    al = align(model, moved, "weight", iterations=5, progress=False, data=data, **options)
    assert al.report["distance_before"] > 0.1
    assert al.report["distance_after"] < 1e-8, al.report["iterations"]


def test_an_unknown_unit_similarity_is_refused_by_name():
    model = tiny_gpt2(n_layer=1).eval()
    # the options class refuses it before any matcher runs (the object then reaches weight matching whole)
    with pytest.raises(BadOption, match="unit_similarity must be one of inner, cosine, l1, got 'dot'"):
        align(model, model, "weight", progress=False, unit_similarity="dot")


def test_restarts_keep_the_closest_alternation_and_still_recover_a_planted_symmetry():
    from glmc.matching.alternation import weight_matching
    from glmc.matching.common import canonical_pair

    a, b = tiny_gpt2(seed=0), tiny_gpt2(seed=1)
    _, arch, va, vb = canonical_pair(a, b)
    _, one = weight_matching(dict(va), dict(vb), arch, iterations=4, progress=False, tol=3e-3)
    _, three = weight_matching(dict(va), dict(vb), arch, iterations=4, progress=False, tol=3e-3, restarts=3)
    assert {s["restart"] for s in three if "restart" in s} == {0, 1, 2}
    assert [s["distance"] for s in three if s.get("restart") == 0] == [s["distance"] for s in one
                                                                      if isinstance(s["step"], int)]
    ends = {r: min(s["distance"] for s in three if s.get("restart") == r) for r in range(3)}
    assert three[-1]["distance"] == pytest.approx(min(ends.values())) and three[-1]["distance"] <= one[-1]["distance"]
    with pytest.raises(BadOption, match="restarts"):
        weight_matching(va, vb, arch, restarts=4, progress=False)
    moved = transform_model(a, random_full_transform(adapter_for(a).arch(a), torch.Generator().manual_seed(2)))
    al = align(a, moved, "weight", iterations=5, progress=False, restarts=2)
    assert al.report["distance_after"] < 1e-8


def test_restarts_default_to_two_for_small_models_and_one_above_the_size_limit(monkeypatch):
    from glmc.matching import alternation

    a, b = tiny_gpt2(seed=0), tiny_gpt2(seed=1)
    # restarts are glmc's alternation's (GPT-2's own default is the paper's, which runs from one first map)
    al = align(a, b, "weight", iterations=3, progress=False, algorithm="glmc")
    assert al.report["restarts"] == 2 and {s.get("restart") for s in al.report["iterations"]} >= {0, 1}
    monkeypatch.setattr(alternation, "AUTO_RESTARTS_UP_TO", sum(p.numel() for p in a.parameters()) // 2)
    al = align(a, b, "weight", iterations=3, progress=False, algorithm="glmc")
    assert al.report["restarts"] == 1 and not any("restart" in s for s in al.report["iterations"])
    assert align(a, b, "weight", iterations=3, progress=False, restarts=3).report["restarts"] == 3


def test_fixed_permutations_still_fit_the_continuous_maps_and_a_given_first_map_is_used():
    from factories import llama
    from glmc.matching.alternation import weight_matching
    from glmc.matching.common import canonical_pair
    from glmc.symmetry.random import random_class_element

    a = llama(seed=0)
    arch = adapter_for(a).arch(a)
    gen = torch.Generator().manual_seed(5)
    planted = random_class_element("residual", arch, gen)  # no permutation moves B: only continuous maps
    for role in ("qk", "ov", "mlp_scale"):
        planted.elements.update(random_class_element(role, arch, gen).elements)
    moved = transform_model(a, planted)
    _, arch, va, vb = canonical_pair(a, moved)
    t, log = weight_matching(dict(va), dict(vb), arch, iterations=5, progress=False, permutations=False)
    assert not any(n.split(".")[0] in ("mlp", "kv_heads", "query_heads") for n in t.elements)
    assert any(n.startswith("mlp_scale") for n in t.elements)
    assert log[-1]["distance"] < 1e-8 < log[0]["distance"]
    # started from the exact residual map, the first iteration lands on B's weights already
    exact = planted.inverse(arch)["residual"]
    _, log = weight_matching(dict(va), dict(vb), arch, iterations=1, progress=False, first_maps=[exact])
    assert [s["distance"] for s in log if s["step"] == 1][0] < 1e-8


def test_reported_distance_after_is_the_distance_of_the_returned_models():
    # weight matching reports the distance its alternation measured instead of measuring the moved model again
    from glmc.matching.common import canonical_pair, view_distance

    model_a, model_b = tiny_gpt2(seed=0), tiny_gpt2(seed=1)
    al = align(model_a, model_b, method="weight", progress=False, algorithm="glmc")
    _, _, view_a, view_b = canonical_pair(al.model_a, al.model_b)
    measured = view_distance(view_a, view_b)
    assert al.report["distance_after"] < al.report["distance_before"]
    assert abs(al.report["distance_after"] - measured) <= 1e-6 * measured
