"""The discrete per-head kinds of glmc/symmetry/kinds/heads.py: closed-form fits recover planted elements, the
learned parametrisation round-trips, and each kind is the subgroup it claims to be."""

import pytest
import torch

from glmc.symmetry.kinds import SignedPermutation, kind

KINDS = ("plane-sign", "plane-quarter-turn", "head-signed-permutation")


def rope(k: int, t: float) -> torch.Tensor:
    """The row-action matrix of RoPE at position t on a head of k (planes (i, i + k/2), distinct frequencies)."""
    theta = t / 10000 ** (torch.arange(k // 2, dtype=torch.float64) * 2 / k)
    c, s = theta.cos(), theta.sin()
    return torch.cat([torch.cat([c.diag(), s.diag()], 1), torch.cat([-s.diag(), c.diag()], 1)], 0)


@pytest.mark.parametrize("name", KINDS)
def test_fit_heads_recovers_a_planted_element(name):
    gen = torch.Generator().manual_seed(0)
    k, b = 8, 3
    c = kind(name).random(k, b, gen).matrix.transpose(-1, -2)  # column action q ↦ C·q
    xb, yb = torch.randn(b, k, 20, generator=gen, dtype=torch.float64), torch.randn(b, k, 20, generator=gen,
                                                                                     dtype=torch.float64)
    xa, ya = c @ xb, c @ yb  # orthogonal: C^-T = C
    assert torch.equal(kind(name).fit_head_maps(xa, xb, ya, yb), c)


@pytest.mark.parametrize("name", KINDS)
def test_elements_are_orthogonal_signed_permutations_and_the_latent_round_trips(name):
    gen = torch.Generator().manual_seed(1)
    e = kind(name).random(8, 2, gen)
    m = e.matrix
    assert torch.allclose(m @ m.transpose(-1, -2), torch.eye(8, dtype=torch.float64).expand(2, 8, 8))
    assert torch.equal(m.abs().sum(-1), torch.ones(2, 8, dtype=torch.float64))  # one ±1 per row
    z = kind(name).latent(e, batch=2).requires_grad_(True)
    hard = kind(name).project(z, hard=True)
    assert torch.equal(kind(name).element(hard).matrix, m)
    soft = kind(name).project(z)  # straight through: the hard value, with a gradient into z
    assert torch.equal(soft.detach(), hard.float()) and soft.requires_grad
    (soft * torch.randn(soft.shape, generator=gen)).sum().backward()
    assert z.grad is not None and z.grad.abs().sum() > 0


@pytest.mark.parametrize("name", ("plane-sign", "plane-quarter-turn"))
def test_plane_kinds_commute_with_rope(name):
    gen = torch.Generator().manual_seed(2)
    m = kind(name).random(8, None, gen).matrix
    for t in (1.0, 3.0, 17.0):
        assert torch.allclose(m @ rope(8, t), rope(8, t) @ m)
    # and a signed permutation drawn at random does not
    p = kind("head-signed-permutation").random(8, None, gen).matrix
    assert not torch.allclose(p @ rope(8, 3.0), rope(8, 3.0) @ p)


def test_plane_signs_are_the_quarter_turns_that_are_diagonal():
    gen = torch.Generator().manual_seed(3)
    sign = kind("plane-sign").random(8, None, gen).matrix
    back = kind("plane-quarter-turn").nearest(sign).matrix  # the nearest quarter turn of a plane sign is itself
    assert torch.equal(back, sign)


def test_unbatched_signed_permutations_are_the_old_kind_draw_for_draw():
    a = kind("head-signed-permutation").random(6, None, torch.Generator().manual_seed(4)).matrix
    b = SignedPermutation().random(6, None, torch.Generator().manual_seed(4)).matrix
    assert torch.equal(a, b)


@pytest.mark.parametrize("name", ("plane-sign", "plane-quarter-turn"))
def test_plane_kinds_compare_heads_blind_to_their_maps(name):
    gen = torch.Generator().manual_seed(5)
    x, y = torch.randn(3, 8, 10, generator=gen, dtype=torch.float64), torch.randn(3, 8, 10, generator=gen,
                                                                                 dtype=torch.float64)
    c = kind(name).random(8, 3, gen).matrix.transpose(-1, -2)
    same = kind(name).head_similarity(x, y, x, y)
    moved = kind(name).head_similarity(x, y, c @ x, c @ y)
    assert torch.allclose(same, moved)
