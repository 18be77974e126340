"""The paper's weight matching (glmc/matching/paper.py; --algorithm paper, and circuit mode without data): its
head cost against explicit circuits, its residual blocks at an exact solution, and the CLI's choice between it,
glmc's alternation and the selection among candidates."""


import torch

from factories import tiny_gpt2
from glmc.matching.heads import head_factors
from glmc.matching.paper import block_cross, circuit_distances, paper_weight_matching, table_cross
from glmc.matching.residual_fit import solve_residual
from glmc.symmetry.random import random_class_element
from glmc.symmetry.structure import structure
from glmc.view.circuit import circuit_params
from glmc.view.model_ops import canonical_view


def test_head_cost_is_the_unsquared_distance_of_explicit_circuits():
    view, adapter = canonical_view(tiny_gpt2(seed=0))
    other, _ = canonical_view(tiny_gpt2(seed=1))
    arch = adapter.arch(tiny_gpt2())
    heads = structure(arch.groups).heads
    cost = circuit_distances(head_factors(view, heads, 1), head_factors(other, heads, 1))
    ca, cb = circuit_params(view, arch.n_layer), circuit_params(other, arch.n_layer)
    qk = torch.cdist(ca["blocks.1.attn.qk"].flatten(1).double(), cb["blocks.1.attn.qk"].flatten(1).double())
    ov = torch.cdist(ca["blocks.1.attn.ov"].flatten(1).double(), cb["blocks.1.attn.ov"].flatten(1).double())
    assert cost.shape == (arch.n_head, arch.n_head)
    assert torch.allclose(cost, qk + ov, rtol=1e-5)
    assert not torch.allclose(cost, (qk ** 2 + ov ** 2), rtol=1e-2)  # un-squared, as the paper's code


def _planted(seed=4):
    """(arch, view A, view B = π(A), π⁻¹) with π a random residual map, head and unit permutations."""
    model = tiny_gpt2()
    view_a, adapter = canonical_view(model)
    arch = adapter.arch(model)
    gen = torch.Generator().manual_seed(seed)
    t = random_class_element("residual", arch, gen)
    for cls in ("heads", "mlp"):
        t = t.then(random_class_element(cls, arch, gen), arch)
    return arch, view_a, t.apply(view_a, arch), t.inverse(arch)


def test_every_residual_block_alone_recovers_the_planted_map():
    """At the exact solution every block's rows satisfy R_A = R_B′·O (the circuits' other side at O, their bias
    coordinate fixed): the layer blocks alone, and the tables alone, give back the planted residual map. A block
    taken on the wrong side, or with its other side unmoved, would not."""
    arch, view_a, view_b, inverse = _planted()
    res = inverse.elements["residual"]
    inner = {k: e for k, e in inverse.elements.items() if k != "residual"}
    eye = torch.eye(view_a["embed"].shape[-1], dtype=torch.float64)
    want = res.act(eye, -1, "co")
    kind_name = arch.groups["residual"].kind
    for m in (block_cross(view_a, view_b, arch, res, inner), table_cross(view_a, view_b, ["embed", "pos_embed"], {})):
        got = solve_residual(m, kind_name).act(eye, -1, "co")
        assert torch.allclose(got, want, atol=1e-5)
    # from a wrong current map the layer blocks alone do not give the planted one
    wrong = random_class_element("residual", arch, torch.Generator().manual_seed(9)).elements["residual"]
    got = solve_residual(block_cross(view_a, view_b, arch, wrong, inner), kind_name).act(eye, -1, "co")
    assert (got - want).abs().max() > 1e-2


def test_seen_token_rows_are_the_only_embedding_rows_fitted():
    arch, view_a, view_b, _ = _planted()
    seen = torch.zeros(view_a["embed"].shape[0], dtype=torch.bool)
    seen[:40] = True
    with_mask = table_cross(view_a, view_b, ["embed"], {"embed": seen})
    by_hand = view_b["embed"][:40].double().T @ view_a["embed"][:40].double() / 40
    assert torch.allclose(with_mask, by_hand, atol=1e-6)
    t, log = paper_weight_matching(view_a, view_b, arch, iterations=2, rows={"embed": seen}, progress=False)
    assert [s["step"] for s in log] == ["start", 1, 2, "done"]
    assert log[-1]["distance"] < 1e-8  # the planted element is found from the seen rows (and positions) too


def test_native_paper_algorithm_recovers_a_planted_symmetry_with_head_maps():
    """algorithm="paper" in native mode: the paper's alternation, then per-head invertible maps given its
    permutations; from B = π(A) with every group of GPT-2 planted it lands on A's weights."""
    from glmc.matching.weight import align
    from glmc.options import WeightOptions
    from glmc.symmetry.random import random_full_transform
    from glmc.view.model_ops import transform_model

    model = tiny_gpt2()
    arch = canonical_view(model)[1].arch(model)
    other = transform_model(model, random_full_transform(arch, torch.Generator().manual_seed(2)))
    al = align(model, other, WeightOptions(algorithm="paper", progress=False))  # the options object, whole
    assert al.report["algorithm"] == "paper" and al.report["head_maps"]
    assert al.report["distance_before"] > 0.1 and al.report["distance_after"] <= 1e-6
    plain = align(model, other, WeightOptions(algorithm="paper", head_maps=False, progress=False))
    assert plain.report["distance_after"] > 1e-3  # the maps are what closes the last gap


def test_auto_algorithm_follows_the_family_declaration_mode_size_and_options(monkeypatch):
    from factories import hf_vit
    from glmc.matching import weight

    model, vit = tiny_gpt2(), hf_vit()
    assert weight.resolve_algorithm(model) == "paper"  # GPT-2 declares the paper's alternation
    assert weight.resolve_algorithm(vit) == "glmc"
    assert weight.resolve_algorithm(vit, mode="circuit") == "paper"
    assert weight.resolve_algorithm(model, restarts=2) == "glmc"  # an option only glmc's alternation takes
    assert weight.resolve_algorithm(model, weighting="rows") == "glmc"
    assert weight.resolve_algorithm(model, algorithm="glmc") == "glmc"
    monkeypatch.setattr(weight, "PAPER_UP_TO", 10)
    assert weight.resolve_algorithm(model) == "glmc"  # above the size limit
    assert weight.resolve_algorithm(model, mode="circuit") == "paper"
