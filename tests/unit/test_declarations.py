"""The design step's mechanisms on their own: kinds with parameters (partial rotary) and their solvers, the kind
registry, norm declarations driving canonicalisation, and the task registry."""

import dataclasses

import pytest
import torch

from factories import tiny_gpt2
from glmc.adapters import adapter_for
from glmc.errors import UnsupportedModel
from glmc.symmetry.declarations import NormSpec, standard_norms
from glmc.symmetry.kinds import KIND_CLASSES, Kind, kind, register_kind
from glmc.symmetry.solvers import fit_scale_rotation
from glmc.symmetry.spec import GroupSpec
from glmc.tasks import task_of_batch, tasks
from glmc.view.canonical import canonicalise, is_canonical


def _rope(x, r, pos):
    """HF rotate_half RoPE on the first r coordinates of x [..., k], at integer position `pos`."""
    h = r // 2
    freq = 1.0 / (10000 ** (torch.arange(h, dtype=torch.float64) / h))
    cos, sin = torch.cos(pos * freq).repeat(2), torch.sin(pos * freq).repeat(2)
    rot, rest = x[..., :r], x[..., r:]
    half = torch.cat([-rot[..., h:], rot[..., :h]], -1)
    return torch.cat([rot * cos + half * sin, rest], -1)


@pytest.mark.parametrize("r", [0, 4, 8, 12])
def test_partial_rotary_maps_keep_every_rotary_score(r):
    """q·Aᵀ and k·A^-1 (row action x·M with M = A on q, A^-T on k) give the same RoPE scores at every offset."""
    gen = torch.Generator().manual_seed(0)
    g = kind("partial-rotary", rotary=r).random(12, None, gen)
    q, k = torch.randn(5, 12, dtype=torch.float64), torch.randn(5, 12, dtype=torch.float64)
    q2, k2 = g.act(q, -1, "co"), g.act(k, -1, "contra")
    for t, s in [(0, 0), (3, 1), (7, 2)]:
        before = _rope(q, r, t) @ _rope(k, r, s).T
        assert torch.allclose(_rope(q2, r, t) @ _rope(k2, r, s).T, before, atol=1e-9)
    if 0 < r < 12:  # a map mixing the blocks does not
        m = g.matrix.clone()
        m[0, r] = 1.0
        mixed = type(g)(m)
        q3, k3 = mixed.act(q, -1, "co"), mixed.act(k, -1, "contra")
        assert not torch.allclose(_rope(q3, r, 3) @ _rope(k3, r, 1).T, _rope(q, r, 3) @ _rope(k, r, 1).T, atol=1e-6)


def test_partial_rotary_fit_recovers_a_planted_map_and_projects_onto_itself():
    gen = torch.Generator().manual_seed(1)
    k = kind("partial-rotary", rotary=4)
    g = k.random(10, 3, gen)  # 3 heads of 10 dims
    xa, ya = torch.randn(3, 10, 17, dtype=torch.float64), torch.randn(3, 10, 17, dtype=torch.float64)
    c = g.matrix.transpose(-1, -2)  # column action
    xb, yb = torch.linalg.solve(c, xa), c.transpose(-1, -2) @ ya  # C·X_B = X_A, C^-T·Y_B = Y_A
    found = k.fit_head_maps(xa, xb, ya, yb)
    assert torch.allclose(found, c, atol=1e-6)
    # its learned parametrisation starts at the element, and the similarity is blind to the group
    assert torch.allclose(k.project(k.latent(g).double(), hard=True), g.matrix, atol=1e-6)
    s_same = k.head_similarity(xa, ya, xa, ya).diagonal()
    s_moved = k.head_similarity(xa, ya, xb, yb).diagonal()
    assert torch.allclose(s_same, s_moved, atol=1e-6)


def test_a_zero_head_gets_an_invertible_closed_form_map():
    # a zero-padded head of an embedded narrower model: any map fits it, the fit must stay invertible
    zero = torch.zeros(2, 8, 5, dtype=torch.float64)
    c = fit_scale_rotation(zero, zero, zero, zero)
    assert torch.isfinite(torch.linalg.inv(c)).all()


def test_kinds_take_parameters_and_register_by_name():
    assert kind("partial-rotary", rotary=6) is kind("partial-rotary", rotary=6)
    assert kind("partial-rotary", rotary=6).rotary(12) == 6
    with pytest.raises(ValueError, match="no parameter"):
        kind("invertible", rotary=2)
    spec = GroupSpec("partial-rotary", 12, batch=2, params={"rotary": 4})
    assert spec.group().rotary(12) == 4 and spec.group("permutation") is kind("permutation")

    @register_kind
    class Doubling(Kind):  # a new kind is a class in a module; nothing else changes
        name = "test-doubling"

    try:
        assert isinstance(kind("test-doubling"), Doubling)
    finally:
        from glmc.symmetry import kinds as registry

        del registry.KINDS["test-doubling"], KIND_CLASSES["test-doubling"]


def test_norm_declarations_drive_canonicalisation():
    model = tiny_gpt2(seed=0)
    adapter = adapter_for(model)
    arch = adapter.arch(model)
    view = adapter.to_canonical(model)
    assert arch.norms == standard_norms("layernorm") and arch.block == "sequential"
    canon = canonicalise(view, arch)
    assert is_canonical(canon, arch)
    # the same weights read as a "1 + w" gain fold w + 1 and leave w = 0 behind
    plus = dataclasses.replace(arch, norms=standard_norms("layernorm", "1+w"))
    folded = canonicalise(view, plus)
    assert is_canonical(folded, plus) and torch.all(folded["blocks.0.ln1.w"] == 0)
    gamma = view["blocks.0.ln1.w"].double() + 1
    assert torch.allclose(folded["blocks.0.attn.q.w"].double(), view["blocks.0.attn.q.w"].double() * gamma,
                          atol=1e-5)
    # a norm on the stream (post-norm) under a residual group larger than it allows is refused by name (the
    # encoders declare the ±P group it leaves); mixed centring too
    post = dataclasses.replace(arch, norms={**arch.norms, "blocks.{i}.ln2": NormSpec("layernorm", "w", "stream")})
    with pytest.raises(UnsupportedModel, match="keep their gains on the stream"):
        canonicalise(view, post)
    mixed = dataclasses.replace(arch, norms={**arch.norms, "ln_final": NormSpec("rmsnorm")})
    with pytest.raises(UnsupportedModel, match="mix kinds"):
        canonicalise(view, mixed)
    with pytest.raises(ValueError, match="placement"):
        NormSpec("layernorm", "w", "after")


def test_tasks_are_declared_once():
    assert {"lm", "cls"} <= set(tasks())
    assert task_of_batch({"input_ids": 0, "targets": 0}) == "lm"
    assert task_of_batch({"pixel_values": 0, "labels": 0}) == "cls"
    with pytest.raises(ValueError, match="no task"):
        task_of_batch({"x": 0})
