"""The faster forms weight matching uses at real sizes give the answers of the direct forms they replace."""

import pytest
import torch

from glmc.symmetry.solvers import best_complex_scale


def _direct_best_scale(zx_b, zx_a, zy_b, zy_a, nx, ny):
    """The candidates of best_complex_scale, each scored on the factors themselves (its former form)."""
    def ls(z, w):
        return (z.conj() * w).sum(-1) / (z.abs() ** 2).sum(-1)

    cx, d = ls(zx_b, zx_a), ls(zy_b, zy_a)
    cy = 1 / d.conj()
    mean = (cx.abs() * cy.abs()).sqrt() * torch.sgn(torch.sgn(cx) + torch.sgn(cy)).where(
        (torch.sgn(cx) + torch.sgn(cy)).abs() > 1e-12, torch.sgn(cx))
    cands = torch.stack([cx, cy, mean])
    losses = torch.stack([((c[..., None] * zx_b - zx_a).abs() ** 2).sum(-1) / nx
                          + ((zy_b / c.conj()[..., None] - zy_a).abs() ** 2).sum(-1) / ny for c in cands])
    return cands.gather(0, losses.argmin(0, keepdim=True))[0], losses.min(0).values


def test_best_scale_from_sums_matches_the_direct_fit_real_and_complex():
    g = torch.Generator().manual_seed(0)
    shape = (6, 5, 40)
    for complex_ in (False, True):

        def rnd(complex_=complex_):
            t = torch.randn(shape, generator=g, dtype=torch.float64)
            return torch.complex(t, torch.randn(shape, generator=g, dtype=torch.float64)) if complex_ else t

        zx_b, zy_b = rnd(), rnd()
        c = rnd()[..., :1] + 0.5  # a planted scale per entry, then noise
        zx_a, zy_a = c * zx_b + 0.3 * rnd(), zy_b / c.conj() + 0.3 * rnd()
        nx, ny = zx_a.abs().pow(2).sum((-1, -2))[..., None], zy_a.abs().pow(2).sum((-1, -2))[..., None]
        got = best_complex_scale(zx_b, zx_a, zy_b, zy_a, nx, ny)
        want, _ = _direct_best_scale(zx_b, zx_a, zy_b, zy_a, nx, ny)
        assert got.dtype == want.dtype
        assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)


def test_best_scale_recovers_a_planted_real_scale_exactly():
    g = torch.Generator().manual_seed(1)
    ub = torch.randn(50, 30, generator=g, dtype=torch.float64)
    db = torch.randn(50, 20, generator=g, dtype=torch.float64)
    s = torch.rand(50, generator=g, dtype=torch.float64) * 3 + 0.1
    s[::2] *= -1
    got = best_complex_scale(ub, s[:, None] * ub, db, db / s[:, None], torch.tensor(1.0), torch.tensor(1.0))
    assert not got.is_complex()
    assert torch.allclose(got, s, rtol=1e-12)


def test_parked_tensor_keeps_its_values_and_its_pages_can_be_dropped():
    import glmc.memory as memory

    if not memory.park({"x": torch.zeros(1)}, ["x"], min_elements=0):
        import pytest

        pytest.skip("nothing is parked here: not Linux, or the temporary directory is in memory")
    x = torch.randn(1 << 20, generator=torch.Generator().manual_seed(0))
    view = {"x": x.clone()}
    assert memory.park(view, ["x"], min_elements=1) == ["x"]
    parked = view["x"]
    assert memory.is_parked(parked) and memory.is_parked(parked.reshape(1024, 1024))  # shared storage
    assert not memory.is_parked(x)

    def resident() -> int:
        start = parked.untyped_storage().data_ptr()
        with open("/proc/self/pagemap", "rb") as f:
            f.seek(start // memory.PAGE * 8)
            raw = f.read(parked.numel() * 4 // memory.PAGE * 8)
        import numpy as np

        return int(((np.frombuffer(raw, np.uint64) >> np.uint64(63)) & np.uint64(1)).sum())

    assert torch.equal(parked, x) and resident() > 0
    memory.release_keys(["x"], view)
    assert resident() == 0
    assert torch.equal(parked, x)  # read back from the file
    parked[0] = 5.0  # an in-place write: that page is the process's own now, and is never dropped
    memory.release_parked([parked])
    assert float(parked[0]) == 5.0 and torch.equal(parked[1:], x[1:])
    assert memory.park(view, ["x"], min_elements=1) == []  # parked once


def test_ranking_product_is_float32_and_close_to_the_exact_one():
    from glmc.matching import common

    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(300, 64, generator=g), torch.randn(200, 64, generator=g)
    exact = x.double() @ y.double().T
    small = common.ranking_product(x, y)
    assert small.dtype == torch.float32 and torch.allclose(small.double(), exact, atol=1e-4)
    old = common.SCORING_BFLOAT16_FROM
    common.SCORING_BFLOAT16_FROM = 1  # as a real-size product
    try:
        big = common.ranking_product(x, y)
    finally:
        common.SCORING_BFLOAT16_FROM = old
    assert big.dtype == torch.float32
    scale = exact.abs().max()
    if common.bfloat16_native(x.device):
        assert 0 < (big.double() - exact).abs().max() < 0.02 * scale  # bfloat16's rounding, no more
        # a ranking survives it: each row's best column is the exact one wherever the best leads by 2 %
        top2 = exact.topk(2, dim=1).values
        clear = (top2[:, 0] - top2[:, 1]) > 0.02 * scale
        assert torch.equal(big.argmax(1)[clear], exact.argmax(1)[clear])
    else:
        assert torch.allclose(big.double(), exact, atol=1e-4)


def test_weight_matching_of_parked_views_finds_the_same_transform(monkeypatch):
    """Big pairs are parked and streamed a block at a time (PARK_VIEWS_FROM); a tiny pair made to take that path
    gets the transform and the function check of the resident one."""
    import sys
    import tempfile

    import glmc
    import glmc.memory as memory
    from factories import llama
    from glmc.adapters import adapter_for
    from glmc.matching import common

    a, b = llama(seed=0), llama(seed=1)
    resident = glmc.align(a, b, method="weight", progress=False)
    monkeypatch.setattr(common, "PARK_VIEWS_FROM", 1)
    monkeypatch.setattr(common, "PARK_TENSORS_FROM", 1)
    keys = []
    monkeypatch.setattr(common, "park", lambda view, ks, **kw: keys.extend(memory.park(view, ks, **kw)))
    parked = glmc.align(a, b, method="weight", progress=False)
    if sys.platform.startswith("linux") and not memory._in_memory(tempfile.gettempdir()):
        assert len(keys) == 2 * len(common.canonical_cpu_view(adapter_for(a), a))  # both whole views
    assert set(parked.transform.elements) == set(resident.transform.elements)
    for name, g in resident.transform.elements.items():
        for k, t in g.tensors().items():
            got = parked.transform.elements[name].tensors()[k]
            if t.is_floating_point():  # page-aligned inputs may take other BLAS paths: the last bits differ
                assert torch.allclose(got, t, atol=1e-5), name
            else:  # permutations
                assert torch.equal(got, t), name
    assert parked.report["max_dlogits_b"] <= 1e-4


def _dense_optimum(s):
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(s.double().numpy(), maximize=True)
    return float(s.double()[rows, cols].sum())


def test_candidate_assignment_finds_the_dense_optimum_on_random_and_planted_problems(monkeypatch):
    from glmc.matching import assignments

    monkeypatch.setattr(assignments, "SPARSE_FROM", 256)
    gen = torch.Generator().manual_seed(0)
    n = 400
    a, b = torch.randn(n, 200, generator=gen), torch.randn(n, 200, generator=gen)
    planted = torch.randperm(n, generator=gen)
    for strength in (0.0, 0.05, 1.0):  # no structure (the hard case), faint, clear
        s = a @ b.T + strength * 200 * torch.eye(n)[planted]  # s[i, planted[i]] raised
        got = assignments.assignment(s)
        assert sorted(got.src.tolist()) == list(range(n))  # a permutation
        value = float(s.double()[torch.arange(n), got.src].sum())
        assert abs(value - _dense_optimum(s)) <= 1e-9 * abs(value)
        if strength == 1.0:
            assert torch.equal(got.src, planted)


def test_candidate_assignment_without_a_perfect_matching_falls_back_to_the_dense_solver(monkeypatch):
    from glmc.matching import assignments

    monkeypatch.setattr(assignments, "SPARSE_FROM", 8)
    monkeypatch.setattr(assignments, "SPARSE_CANDIDATES", 2)
    # every row's two best columns are 0 and 1, so the candidates cover two columns of 16: no perfect matching
    s = torch.rand(16, 16, generator=torch.Generator().manual_seed(1))
    s[:, :2] += 10
    assert assignments._candidate_assignment(assignments._cost(s), 2) == (None, None)
    got = assignments.assignment(s)
    assert abs(float(s.double()[torch.arange(16), got.src].sum()) - _dense_optimum(s)) <= 1e-9


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_bfloat16_moved_unit_rows_still_recover_a_planted_symmetry(family, monkeypatch):
    # the MLP rows only the unit ranking reads are moved in bfloat16 above the size where that ranking is
    # formed from bfloat16 products anyway; force both for a tiny model and check nothing else reads them
    import factories
    from glmc.adapters import adapter_for
    from glmc.matching import align, common, mlp_units
    from glmc.symmetry.random import random_full_transform
    from glmc.symmetry.structure import structure
    from glmc.view.model_ops import transform_model

    for module in (common, mlp_units):
        monkeypatch.setattr(module, "SCORING_BFLOAT16_FROM", 1)
    monkeypatch.setattr(common, "bfloat16_native", lambda device: True)
    torch.manual_seed(0)
    model = (factories.tiny_gpt2() if family == "gpt2" else factories.llama()).eval()
    _, arch, va, vb = common.canonical_pair(model, model)
    units = structure(arch.groups).units
    low = mlp_units.ranked_in_bfloat16(va, vb, units, 0)
    assert low == (("blocks.0.mlp.gate.w",) if family == "llama" else ("blocks.0.mlp.in.w", "blocks.0.mlp.out.w"))
    assert mlp_units.ranked_in_bfloat16(va, vb, units, 0, "cosine") == (low if family == "llama" else ())
    moved = transform_model(model, random_full_transform(adapter_for(model).arch(model),
                                                         torch.Generator().manual_seed(3)))
    al = align(model, moved, "weight", iterations=5, progress=False, algorithm="glmc")
    assert al.report["distance_before"] > 0.1
    assert al.report["distance_after"] < 1e-8, al.report["iterations"]
