"""Learned matching: projections, the differentiable transform path, and exactness of the result."""

import pytest
import torch

from factories import tiny_gpt2
from glmc.adapters import adapter_for
from glmc.matching.learned import Latents
from glmc.symmetry.projections import hard_permutation, hungarian_ste, polar, sinkhorn
from glmc.symmetry.random import random_full_transform
from glmc.symmetry.transform import apply_elements
from glmc.view.canonical import canonicalise


def test_polar_gradient_is_correct_at_and_away_from_orthogonal_points():
    q, _ = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64))
    for z in (q, torch.randn(6, 6, dtype=torch.float64)):
        z = z.clone().requires_grad_(True)
        assert torch.autograd.gradcheck(polar, (z,))
    out = polar(torch.randn(5, 5, dtype=torch.float64))
    assert torch.allclose(out @ out.T, torch.eye(5, dtype=torch.float64), atol=1e-12)


def test_hungarian_straight_through():
    z = torch.randn(7, 7, requires_grad=True)
    p = hungarian_ste(z)
    hard = hard_permutation(z)
    assert torch.allclose(p.detach(), hard, atol=1e-6)  # forward value: the hard permutation
    assert torch.equal(hard.sum(0), torch.ones(7)) and torch.equal(hard.sum(1), torch.ones(7))
    assert float((hard * z.detach()).sum()) >= float((torch.eye(7) * z.detach()).sum())  # it maximises <P, Z>
    w = torch.randn(7, 7)
    (p * w).sum().backward()
    assert torch.equal(z.grad, w)  # identity gradient onto the latent


def test_hard_permutation_is_an_optimal_assignment_with_and_without_the_argmax_shortcut():
    from scipy.optimize import linear_sum_assignment

    gen = torch.Generator().manual_seed(0)
    one_hot = torch.eye(9)[torch.randperm(9, generator=gen)]
    for z in (one_hot + 0.3 * torch.rand(9, 9, generator=gen),  # column maxima in distinct rows: the shortcut
              torch.rand(9, 9, generator=gen), torch.zeros(9, 9).index_fill_(0, torch.tensor([2]), 1.0)):
        hard = hard_permutation(z)
        assert torch.equal(hard.sum(0), torch.ones(9)) and torch.equal(hard.sum(1), torch.ones(9))
        rows, cols = linear_sum_assignment(z.double().numpy(), maximize=True)
        assert float((hard * z).sum()) == pytest.approx(float(z[rows, cols].sum()), abs=1e-6)
    assert torch.equal(hard_permutation(one_hot + 0.3 * torch.rand(9, 9, generator=gen)), one_hot)


def test_sinkhorn_is_doubly_stochastic():
    # seeded: with too few iterations some draws converge slower than 1e-4 (the earlier unseeded test flaked)
    s = sinkhorn(torch.randn(6, 6, generator=torch.Generator().manual_seed(0)), tau=0.5, iterations=200)
    assert torch.allclose(s.sum(0), torch.ones(6), atol=1e-4) and torch.allclose(s.sum(1), torch.ones(6), atol=1e-4)


@pytest.mark.parametrize("perm_only", [False, True])
def test_differentiable_path_matches_exact_transform(perm_only):
    """apply_dense on the latents' hard projection gives the same weights as the exact Transform."""
    model = tiny_gpt2(n_layer=2)
    adapter = adapter_for(model)
    arch = adapter.arch(model)
    view = canonicalise(adapter.to_canonical(model), arch)
    t = random_full_transform(arch, torch.Generator().manual_seed(0))
    if perm_only:
        from glmc.symmetry.kinds import kind

        t.elements = {k: v for k, v in t.elements.items() if not k.startswith(("qk.", "ov."))}
        t.elements["residual"] = kind("permutation").random(arch.d_model, None, torch.Generator().manual_seed(1))
    lat = Latents(t, arch, kinds={"residual": "permutation"} if perm_only else None)
    exact = lat.transform().apply(view, arch)
    dense = apply_elements(view, lat.dense(hard=True), arch)
    for k in view:
        assert torch.allclose(exact[k], dense[k], atol=1e-4), k
    # and the latents reproduce the transform they were initialised from
    ref = t.apply(view, arch)
    for k in view:
        assert torch.allclose(ref[k], exact[k], atol=1e-4), k


def test_exact_transform_is_projected_in_float64_whatever_the_latents():
    # the latents train in float32 (on a GPU, a float32 SVD); the transform written out must still be an exact
    # symmetry: on an H200 a float32 polar factor moved the logits by 1.6e-4, over the 1e-4 check

    model = tiny_gpt2(seed=0)
    arch = adapter_for(model).arch(model)
    init = random_full_transform(arch, torch.Generator().manual_seed(0))
    lat = Latents(init, arch)
    with torch.no_grad():
        for z in lat.z.values():
            z.add_(0.1 * torch.randn_like(z))  # away from the group, as after training steps
    o = lat.transform()["residual"].matrix
    assert o.dtype == torch.float64
    assert torch.allclose(o @ o.T, torch.eye(o.shape[0], dtype=torch.float64), atol=1e-12)


def test_autocast_runs_the_training_loss_in_low_precision_and_keeps_latents_float32():
    from types import SimpleNamespace

    from glmc.matching.alternation import weight_matching
    from glmc.matching.common import canonical_pair
    from glmc.matching.learned import LearnedMatcher

    a, b = tiny_gpt2(seed=0), tiny_gpt2(seed=1)
    adapter, arch, va, vb = canonical_pair(a, b)
    init, _ = weight_matching(va, vb, arch, iterations=1, progress=False)
    ids = torch.randint(0, a.config.vocab_size, (4, 17), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids[:, :-1], "targets": ids[:, 1:]}
    losses = {}
    for dtype in (None, "bfloat16"):
        m = LearnedMatcher([va, vb], adapter, arch, adapter.from_canonical(va, a), SimpleNamespace(task="lm"), [init],
                           autocast=dtype)
        opt = m.optimizer()
        losses[dtype] = float(m.train_step(batch, [0.5, 0.5], opt))
        assert all(p.dtype == torch.float32 and torch.isfinite(p.grad).all() for p in m.latents.parameters()
                   if p.grad is not None)
    assert losses[None] != losses["bfloat16"]  # the forward really ran in bfloat16
    assert losses["bfloat16"] == pytest.approx(losses[None], rel=2e-2)


def _llama(seed):
    from glmc.adapters.registry import adapter_named

    torch.manual_seed(seed)
    return adapter_named("llama").build(vocab_size=61, context=32, layers=2, width=32, heads=4, mlp=40,
                                              kv_heads=2).eval()


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_gradient_checkpointing_gives_the_same_step_and_recomputes_the_blocks(family):
    """Checkpointed blocks are recomputed during backward with the interpolated weights of the forward pass (not
    the template's own), so the loss and every latent's gradient are those of the plain step."""
    from types import SimpleNamespace

    from glmc.matching.alternation import weight_matching
    from glmc.matching.common import canonical_pair
    from glmc.matching.learned import LearnedMatcher

    a, b = (tiny_gpt2(seed=0), tiny_gpt2(seed=1)) if family == "gpt2" else (_llama(0), _llama(1))
    adapter, arch, va, vb = canonical_pair(a, b)
    init, _ = weight_matching(va, vb, arch, iterations=1, progress=False)
    ids = torch.randint(0, 61, (4, 17), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids[:, :-1], "targets": ids[:, 1:]}
    out = {}
    for checkpoint in (False, True):
        m = LearnedMatcher([va, vb], adapter, arch, adapter.from_canonical(va, a), SimpleNamespace(task="lm"), [init],
                           checkpoint=checkpoint)
        calls: list = []
        blocks = [mod for k, mod in adapter.hook_modules(m.template).items() if k.count(".") == 1]
        hooks = [blk.register_forward_hook(lambda *_, seen=calls: seen.append(1)) for blk in blocks]
        loss = m.batch_loss(batch, m.params_at([0.5, 0.5]))
        loss.backward()
        for h in hooks:
            h.remove()
        grads = [p.grad.clone() for p in m.latents.parameters() if p.grad is not None]
        out[checkpoint] = (float(loss.detach()), grads, calls)
        assert "forward" not in vars(blocks[0])  # the blocks are restored after the call
    assert out[True][0] == pytest.approx(out[False][0], rel=1e-6)
    assert len(out[True][1]) == len(out[False][1]) > 0
    for g_ckpt, g in zip(out[True][1], out[False][1]):
        assert torch.allclose(g_ckpt, g, rtol=1e-4, atol=1e-7)
    assert len(out[False][2]) == arch.n_layer and len(out[True][2]) == 2 * arch.n_layer  # recomputed in backward


def test_gradient_checkpointing_is_refused_in_circuit_mode():
    from types import SimpleNamespace

    from glmc.errors import BadOption
    from glmc.matching.alternation import weight_matching
    from glmc.matching.common import canonical_pair
    from glmc.matching.learned import LearnedMatcher

    a, b = tiny_gpt2(seed=0), tiny_gpt2(seed=1)
    adapter, arch, va, vb = canonical_pair(a, b)
    init, _ = weight_matching(va, vb, arch, iterations=1, head_maps=False, progress=False)
    with pytest.raises(BadOption, match="circuit mode"):
        LearnedMatcher([va, vb], adapter, arch, adapter.from_canonical(va, a), SimpleNamespace(task="lm"), [init],
                       mode="circuit", checkpoint=True)


def test_learned_matching_keeps_weight_matchings_permutations_unless_given_a_permutation_rate():
    """At the default perm_lr 0 the permutation latents are constants (no gradient formed, not in the optimiser)
    while the continuous maps train; a positive rate puts them back in the optimiser with gradients."""
    from types import SimpleNamespace

    from glmc.matching.alternation import weight_matching
    from glmc.matching.common import canonical_pair
    from glmc.matching.learned import LearnedMatcher
    a, b = tiny_gpt2(seed=0), tiny_gpt2(seed=1)
    adapter, arch, va, vb = canonical_pair(a, b)
    init, _ = weight_matching(va, vb, arch, iterations=1, progress=False)
    ids = torch.randint(0, 61, (4, 17), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids[:, :-1], "targets": ids[:, 1:]}
    for perm_lr in (None, 0.5):  # None: the optimiser's default rate, which must keep the permutations
        m = LearnedMatcher([va, vb], adapter, arch, adapter.from_canonical(va, a), SimpleNamespace(task="lm"), [init])
        opt = m.optimizer(lr=1e-2) if perm_lr is None else m.optimizer(lr=1e-2, perm_lr=perm_lr)
        perm_lr = perm_lr or 0.0
        perm = m.latents[0].discrete()
        rest = [p for p in m.latents.parameters() if all(p is not q for q in perm)]
        start = [p.detach().clone() for p in rest]
        for _ in range(3):
            m.train_step(batch, [0.5, 0.5], opt)
        assert perm and all(p.requires_grad == (perm_lr > 0) for p in perm)
        assert sum(len(g["params"]) for g in opt.param_groups) == len(rest) + (len(perm) if perm_lr else 0)
        assert all((p.grad is None) == (perm_lr == 0) for p in perm)
        assert any(not torch.equal(p, s) for p, s in zip(rest, start))  # the continuous maps did train
        if not perm_lr:
            found = m.transforms()[0]
            for name in found.groups():
                if name.startswith(("heads.", "mlp.")):
                    assert torch.equal(found[name].src, init[name].src), name


def test_a_constant_permutation_latent_is_projected_once_and_again_after_it_changes():
    from glmc.matching.alternation import weight_matching
    from glmc.matching.common import canonical_pair
    from glmc.matching.learned import Latents

    a, b = tiny_gpt2(seed=0), tiny_gpt2(seed=1)
    _, arch, va, vb = canonical_pair(a, b)
    init, _ = weight_matching(va, vb, arch, iterations=1, progress=False)
    lat = Latents(init, arch)
    for p in lat.discrete():
        p.requires_grad_(False)
    name = next(n for n in lat.kinds if n.startswith("mlp."))
    first, again = lat.dense()[name], lat.dense()[name]
    assert first is again and torch.equal(first.src, init[name].src.to(first.src))
    z = lat.z[name.replace(".", "_")]
    with torch.no_grad():
        z.copy_(z[torch.roll(torch.arange(z.shape[0]), 1)])  # someone moves it in place: projected anew
    moved = lat.dense()[name]
    assert torch.equal(moved.src, (first.src + 1) % z.shape[0])  # each row of z moved one down
    trained = next(n for n in lat.kinds if n.startswith("residual"))
    assert lat.dense()[trained] is not lat.dense()[trained]  # a latent that trains is projected every step


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_groups_that_do_not_train_act_once_with_the_same_result(family):
    """At perm_lr 0 the permutations are applied to B once, before the trained maps; the moved view and the
    latents' gradients are those of applying every element in declaration order, and a change to a frozen latent
    is seen."""
    from types import SimpleNamespace

    from glmc.matching.common import canonical_pair
    from glmc.matching.learned import LearnedMatcher
    from glmc.symmetry.random import random_full_transform
    from glmc.symmetry.transform import apply_elements, constant_first

    a, b = (tiny_gpt2(seed=0), tiny_gpt2(seed=1)) if family == "gpt2" else (_llama(0), _llama(1))
    adapter, arch, va, vb = canonical_pair(a, b)
    init = random_full_transform(arch, torch.Generator().manual_seed(0))
    m = LearnedMatcher([va, vb], adapter, arch, adapter.from_canonical(va, a), SimpleNamespace(task="lm"), [init])
    m.optimizer(perm_lr=0.0)  # freezes the permutations
    lat = m.latents[0]
    frozen = [n for n in lat.kinds if not lat.z[n.replace(".", "_")].requires_grad]
    first = constant_first(vb, frozen, arch)
    assert first and set(first) <= set(frozen)
    for _ in range(2):  # before and after a frozen latent changes
        moved = m.moved(False)[1]
        cached = m._first[0][1]
        reference = apply_elements(vb, lat.dense(False), arch)
        assert moved.keys() == reference.keys()
        for k in reference:
            assert torch.allclose(moved[k], reference[k], atol=1e-5), k
        trained = [p for p in lat.parameters() if p.requires_grad]
        grads = torch.autograd.grad(sum(v.square().sum() for v in moved.values()), trained)
        ref_grads = torch.autograd.grad(sum(v.square().sum() for v in reference.values()), trained)
        for g, r in zip(grads, ref_grads):
            assert torch.allclose(g, r, rtol=1e-4, atol=1e-5)
        assert m.moved(False)[1] is not moved and m._first[0][1] is cached  # the constant part is reused
        with torch.no_grad():  # another frozen permutation: the cache must notice
            z = lat.z[sorted(first)[0].replace(".", "_")]
            z.copy_(z.flip(0))
