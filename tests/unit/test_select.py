"""Weight matching's candidate selection (glmc/matching/select.py): it keeps the candidate whose path midpoint has
the lowest training loss, only when asked or by default with data, and refuses options it cannot honour."""


import pytest
import torch

from factories import tiny_gpt2
from glmc.errors import BadOption
from glmc.matching import weight
from glmc.matching.select import CANDIDATES, candidate_transforms, parse_candidates


def test_every_candidate_is_an_exact_transform_of_b():
    from glmc.symmetry.random import random_full_transform
    from glmc.view.model_ops import canonical_view, transform_model

    model = tiny_gpt2()
    view_a, adapter = canonical_view(model)
    arch = adapter.arch(model)
    other = transform_model(model, random_full_transform(arch, torch.Generator().manual_seed(3)))
    view_b, _ = canonical_view(other)
    found = candidate_transforms(view_a, view_b, arch, tuple(CANDIDATES), iterations=8, residual=None, tol=1e-6,
                                 rows={}, head_maps=True, progress=False)
    assert len(found) == len(CANDIDATES) + 1  # "glmc" gives one candidate per first map
    for name, t, _ in found:
        moved = t.apply(view_b, arch)
        # a planted symmetry is found by every candidate: B comes back onto A
        gap = max(float((moved[k] - view_a[k]).abs().max()) for k in view_a)
        assert gap < 1e-3, name


def test_selection_is_the_default_only_with_data_a_small_model_and_no_single_algorithm(monkeypatch):
    model, data = tiny_gpt2(), object()
    assert weight.resolve_select(model) == 0  # data-free without data
    assert weight.resolve_select(model, data=data) == weight.SELECT_BATCHES
    assert weight.resolve_select(model, mode="circuit", data=data) == weight.SELECT_BATCHES
    assert weight.resolve_select(model, mode="circuit") == 0  # without data: the paper's alternation alone
    assert weight.resolve_select(model, mode="circuit", data=data, algorithm="paper") == 0
    assert weight.resolve_algorithm(model, mode="circuit") == "paper"
    assert weight.resolve_select(model, mode="circuit", data=data, select_batches=2) == 2
    assert weight.resolve_select(model, algorithm="paper", data=data) == 0
    assert weight.resolve_select(model, data=data, restarts=2) == 0  # glmc's restarts choose by distance
    assert weight.resolve_select(model, data=data, select_batches=0) == 0
    assert weight.resolve_select(model, data=data, candidates="glmc") == weight.SELECT_BATCHES
    assert weight.wants_data(tiny_gpt2(), algorithm="glmc") is False
    assert weight.wants_data(tiny_gpt2(), algorithm="glmc", select_batches=3) is True
    monkeypatch.setattr(weight, "SELECT_UP_TO", 10)
    assert weight.resolve_select(model, data=data) == 0  # above the size limit


@pytest.mark.parametrize("kwargs, words", [
    (dict(select_batches=2), "needs the models' data"),
    (dict(select_batches=2, data=object(), algorithm="glmc"), "nothing to choose among"),
    (dict(select_batches=-1, data=object()), "counts training batches"),
    (dict(select_batches=2, data=object(), restarts=2), "restarts cannot apply"),
    (dict(select_batches=2, data=object(), weighting="none"), "weighting cannot apply"),
])
def test_selection_options_it_cannot_honour_are_refused(kwargs, words):
    with pytest.raises(BadOption, match=words):
        weight.resolve_select(tiny_gpt2(), **kwargs)


def test_unknown_candidates_are_refused_by_name():
    with pytest.raises(BadOption, match="unknown weight-matching candidate.*nope.*choose from glmc, paper"):
        parse_candidates("glmc,nope")
    assert parse_candidates(" glmc , paper ") == ("glmc", "paper")
