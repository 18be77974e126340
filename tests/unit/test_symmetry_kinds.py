"""Group kinds and declarations: each kind's random elements, inverses, nearest elements and learned
parametrisation, and a restricted declaration flowing through every algorithm that reads it."""

import dataclasses
import math

import pytest
import torch

from factories import tiny_gpt2
from glmc.adapters import adapter_for
from glmc.symmetry.elements import DenseMap, IndexMap, LinearMap, ScaleMap
from glmc.symmetry.kinds import KINDS, ScaleRotation, kind
from glmc.symmetry.random import exact_classes, random_class_element, random_full_transform
from glmc.symmetry.spec import GroupSpec
from glmc.symmetry.transform import apply_elements
from glmc.view.canonical import canonicalise

INVERTIBLE = [k for k, v in KINDS.items() if v.invertible]


def _dense(e):
    return e.matrix() if isinstance(e, (IndexMap, ScaleMap)) else e.matrix


@pytest.mark.parametrize("name", INVERTIBLE)
def test_co_and_contra_are_dual_and_inverse_undoes(name):
    gen = torch.Generator().manual_seed(0)
    g = kind(name).random(8, None, gen)
    u, v = torch.randn(5, 8, dtype=torch.float64), torch.randn(5, 8, dtype=torch.float64)
    # <co(u), contra(v)> = <u, v>: readers see writers unchanged
    assert torch.allclose((g.act(u, 1, "co") * g.act(v, 1, "contra")).sum(), (u * v).sum())
    assert torch.allclose(g.inverse().act(g.act(u, 1, "co"), 1, "co"), u, atol=1e-10)
    m = _dense(g).double()
    if kind(name).orthogonal:
        assert torch.allclose(m @ m.T, torch.eye(8, dtype=torch.float64), atol=1e-10)


@pytest.mark.parametrize("name", ["permutation", "orthogonal", "orthogonal-fixing-ones", "signed-permutation"])
def test_nearest_element_recovers_a_planted_one(name):
    """argmax ⟨E, M⟩ over the group, for M = a group element plus a little noise, is that element."""
    gen = torch.Generator().manual_seed(1)
    k = kind(name)
    g = k.random(9, None, gen)
    m = _dense(g).double() + 0.01 * torch.randn(9, 9, generator=gen, dtype=torch.float64)
    assert torch.allclose(_dense(k.nearest(m)).double(), _dense(g).double(), atol=0.05)
    if name == "orthogonal-fixing-ones":
        assert torch.allclose(_dense(k.nearest(m)).double().sum(0), torch.ones(9, dtype=torch.float64))


@pytest.mark.parametrize("name", ["permutation", "orthogonal", "orthogonal-fixing-ones", "signed-permutation",
                                  "invertible", "scale-rotation", "diagonal"])
def test_latent_starts_at_its_element(name):
    gen = torch.Generator().manual_seed(2)
    k = kind(name)
    g = k.random(6, None, gen)
    z = k.latent(g)
    back = k.element(k.project(z, hard=True))
    assert torch.allclose(_dense(back).double(), _dense(g).double(), atol=1e-5)


@pytest.mark.parametrize("name, batch", [("permutation", None), ("grouped-permutation", 3),
                                         ("signed-permutation", None), ("diagonal", None)])
@pytest.mark.parametrize("mode", ["co", "contra"])
def test_structured_learned_maps_equal_the_dense_product(name, batch, mode):
    """Learned matching applies permutations by indexing and scales elementwise; values and the gradients into
    the latent and into the moved tensor must be those of the dense matrix product, on every axis, also for a
    map shared by r consecutive entries (heads over their dimensions)."""
    gen = torch.Generator().manual_seed(3)
    k, n = kind(name), 6
    z0 = k.latent(k.random(n, batch, gen), batch=batch).double()
    z0 = z0 + 0.3 * torch.randn(z0.shape, generator=gen, dtype=torch.float64)  # off one-hot: a real gradient
    for shape, axis in [((n, 5), 0), ((4, n), 1), ((3, 2 * n, 2), 1), ((n,), 0), ((2, 3 * n), -1)]:
        grads, values = [], []
        for structured in (True, False):
            z = z0.clone().requires_grad_(True)
            t = torch.randn(shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64,
                            requires_grad=True)
            g = k.differentiable(z) if structured else DenseMap(k.project(z), k.orthogonal)
            assert isinstance(g, DenseMap) != structured
            out = g.act(t, axis, mode)
            (out * torch.linspace(-1, 2, out.numel(), dtype=torch.float64).view(out.shape)).sum().backward()
            values.append(out.detach())
            grads.append((z.grad, t.grad))
        assert torch.allclose(values[0], values[1], atol=1e-12)
        assert torch.allclose(grads[0][0], grads[1][0], atol=1e-10)
        assert torch.allclose(grads[0][1], grads[1][1], atol=1e-10)
        assert grads[0][0].abs().sum() > 0


def test_subgroups_are_declared_as_such():
    assert kind("orthogonal").admits("orthogonal-fixing-ones") and kind("orthogonal").admits("signed-permutation")
    assert kind("orthogonal-fixing-ones").admits("permutation")
    assert not kind("orthogonal-fixing-ones").admits("signed-permutation")  # a sign flip moves the ones vector
    assert kind("invertible").admits("scale-rotation") and not kind("scale-rotation").admits("orthogonal")


def test_scale_rotation_commutes_with_rotary_embeddings():
    """HF's RoPE rotates planes (i, i + k/2): q·R(θ). The declared QK kind commutes with every such R."""
    k, half = 8, 4
    gen = torch.Generator().manual_seed(3)
    theta = torch.rand(half, generator=gen, dtype=torch.float64) * 6
    cos, sin = torch.cos(theta), torch.sin(theta)
    rot = ScaleRotation.matrix(torch.stack([cos, sin], -1))  # the rotation itself is in the family
    a = kind("scale-rotation").random(k, None, gen).matrix
    assert torch.allclose(a @ rot, rot @ a, atol=1e-12)
    general = kind("invertible").random(k, None, gen).matrix
    assert not torch.allclose(general @ rot, rot @ general, atol=1e-3)
    # and it is what HF's rotate_half computes: x·R = x·cos + rotate_half(x)·sin
    x = torch.randn(3, k, dtype=torch.float64, generator=gen)
    rotate_half = torch.cat([-x[:, half:], x[:, :half]], -1)
    assert torch.allclose(x @ rot, x * torch.cat([cos, cos]) + rotate_half * torch.cat([sin, sin]), atol=1e-12)


def test_rotary_head_similarity_sees_exactly_the_rotary_qk_maps():
    """weight matching's per-plane QK similarity: unchanged by any scale-rotation QK map (q ↦ C·q, k ↦ C^-T·k),
    changed by a general invertible one (which RoPE does not admit), and ‖M‖² of the per-plane circuits on the
    diagonal."""
    from glmc.symmetry.solvers import circuit_similarity, rotary_circuit_similarity

    gen = torch.Generator().manual_seed(5)
    q, k = (torch.randn(3, 8, 6, dtype=torch.float64, generator=gen) for _ in range(2))  # [heads, k, d]
    base = rotary_circuit_similarity(q, k, q, k)
    rot = kind("scale-rotation").random(8, 3, gen)
    moved = rotary_circuit_similarity(q, k, rot.act(q, 1, "co", 0), rot.act(k, 1, "contra", 0))
    assert torch.allclose(moved, base, atol=1e-10)
    general = kind("invertible").random(8, 3, gen)
    assert not torch.allclose(rotary_circuit_similarity(q, k, general.act(q, 1, "co", 0),
                                                        general.act(k, 1, "contra", 0)), base, atol=1e-3)
    # the whole-circuit similarity cannot tell those two apart
    assert torch.allclose(circuit_similarity(q, k, general.act(q, 1, "co", 0), general.act(k, 1, "contra", 0)),
                          circuit_similarity(q, k, q, k), atol=1e-8)
    zq, zk = torch.complex(q[:, :4], q[:, 4:]), torch.complex(k[:, :4], k[:, 4:])
    per_plane = torch.einsum("hpd,hpe->hpde", zq, zk.conj())  # M_p = z_q ⊗ conj(z_k)
    assert torch.allclose(base.diagonal(), per_plane.abs().pow(2).sum((-1, -2, -3)), atol=1e-10)


def test_shared_maps_serve_consecutive_entries():
    """b maps (one per key/value head) on an axis of b·r entries (query heads): entry j uses map j // r."""
    gen = torch.Generator().manual_seed(4)
    maps = kind("invertible").random(4, 2, gen)
    t = torch.randn(6, 4, 5, dtype=torch.float64)  # 6 query heads, 3 per key/value head
    out = maps.act(t, 1, "co", 0)
    for h in range(6):
        assert torch.allclose(out[h], maps.matrix[h // 3].T @ t[h])
    dense = DenseMap(maps.matrix, orthogonal=False).act(t, 1, "contra", 0)
    assert torch.allclose(dense, maps.act(t, 1, "contra", 0))
    perm = IndexMap(torch.tensor([1, 0]))
    assert torch.equal(perm.act(t, 0, "co"), t[[3, 4, 5, 0, 1, 2]])  # key/value groups move as blocks


def test_a_restricted_declaration_reaches_every_algorithm():
    """An adapter restricts a group by declaring another kind: here orthogonal per-head maps. Random elements,
    verify, inversion and weight matching's solver then all use it."""
    from glmc.invariance import verify_model
    from glmc.matching.alternation import weight_matching

    model = tiny_gpt2(n_layer=1, n_embd=16, n_head=2)
    adapter = adapter_for(model)
    base = adapter.arch(model)
    groups = dict(base.groups, qk=dataclasses.replace(base.groups["qk"], kind="orthogonal"))
    arch = dataclasses.replace(base, groups=groups)
    t = random_full_transform(arch, torch.Generator().manual_seed(5))
    qk = t["qk.0"].matrix
    assert torch.allclose(qk @ qk.transpose(-1, -2), torch.eye(8, dtype=qk.dtype).expand_as(qk), atol=1e-10)
    view = canonicalise(adapter.to_canonical(model), arch)
    moved = t.apply(view, arch)
    back = t.inverse(arch).apply(moved, arch)
    assert all(torch.allclose(back[k], view[k], atol=1e-5) for k in view)
    found, _ = weight_matching(view, moved, arch, iterations=3, progress=False)
    assert torch.allclose(found["qk.0"].matrix @ found["qk.0"].matrix.transpose(-1, -2),
                          torch.eye(8).expand(2, 8, 8), atol=1e-5)
    assert all(torch.allclose(found.apply(moved, arch)[k], view[k], atol=1e-4) for k in view)
    # dropping a role removes its class everywhere
    no_ov = dataclasses.replace(base, groups={r: g for r, g in base.groups.items() if r != "ov"})
    assert "ov" not in exact_classes(no_ov) and not any(n.startswith("ov.") for n in
                                                       random_full_transform(no_ov, torch.Generator()).elements)
    with pytest.raises(ValueError, match="declares no 'ov' group"):
        random_class_element("ov", no_ov, torch.Generator())
    assert all(c.ok for c in verify_model(model))


def test_groups_are_data_on_the_arch():
    model = tiny_gpt2(n_layer=2, n_embd=32, n_head=4, activation="relu")
    arch = adapter_for(model).arch(model)
    assert list(arch.groups) == ["residual", "heads", "qk", "ov", "mlp"]
    assert arch.groups["residual"] == GroupSpec("orthogonal-fixing-ones", 32, subgroups=("permutation",))
    assert arch.groups["qk"].batch == 4 and arch.groups["qk"].follows == "heads" and arch.groups["qk"].per_layer
    assert arch.groups["mlp"].extensions == ("semi-permutation", "zero-pad")
    assert math.isclose(float(arch.to_dict()["groups"]["qk"]["size"]), 8)


def test_an_element_of_an_undeclared_group_is_refused():
    model = tiny_gpt2(n_layer=1)
    adapter = adapter_for(model)
    arch = adapter.arch(model)
    with pytest.raises(ValueError, match="acts on no tensor"):
        apply_elements(adapter.to_canonical(model), {"mlp.5": kind("permutation").random(4, None, None)}, arch)
    with pytest.raises(ValueError, match="unknown group kind"):
        kind("rotation")
    assert isinstance(kind("orthogonal").random(3, None, torch.Generator()), LinearMap)


def test_grouped_permutations_stay_inside_their_blocks():
    """Query heads permute only inside their key/value group: random elements, nearest (per block) and the
    learned parametrisation all keep block g's entries in block g."""
    k, gen = kind("grouped-permutation"), torch.Generator().manual_seed(6)
    assert kind("permutation").admits("grouped-permutation")
    e = k.random(12, 3, gen)  # 3 groups of 4
    assert e.is_permutation() and torch.equal(e.src // 4, torch.arange(12) // 4)
    assert not torch.equal(e.src, torch.arange(12))
    dense = e.matrix().double()
    blocks = torch.stack([dense[g * 4:(g + 1) * 4, g * 4:(g + 1) * 4] for g in range(3)])
    found = k.nearest(blocks + 0.01 * torch.randn(3, 4, 4, generator=gen, dtype=torch.float64))
    assert torch.equal(found.src, e.src)
    z = k.latent(e, batch=3)
    assert z.shape == (3, 4, 4)
    assert torch.equal(k.element(k.project(z, hard=True)).src, e.src)
    with pytest.raises(ValueError, match="block count"):
        k.latent(e)


def test_sign_permutation_offers_the_nearest_element_of_each_sign():
    from glmc.symmetry.kinds import kind

    n = 6
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    planted, other = torch.zeros(n, n, dtype=torch.float64), torch.zeros(n, n, dtype=torch.float64)
    planted[perm, torch.arange(n)] = 1.0
    other[perm.roll(1), torch.arange(n)] = 1.0  # no entry in common with `planted`
    moments = -2.0 * planted + other  # best element −planted (score 2n); best with sign + is other (score n)
    k = kind("sign-permutation")
    assert torch.equal(k.nearest(moments).matrix, -planted)
    plus, minus = k.nearest_per_sign(moments)
    assert torch.equal(plus.matrix, other) and torch.equal(minus.matrix, -planted)
    orthogonal = kind("orthogonal")  # no discrete sign: one element
    (only,) = orthogonal.nearest_per_sign(moments)
    assert torch.equal(only.matrix, orthogonal.nearest(moments).matrix)
