"""What lets glmc run on big checkpoints without changing a result: low-precision evaluation of the path,
the consuming transform of `finish`, and the allocator hooks of glmc/memory.py."""

import pytest
import torch

from factories import tiny_gpt2
from glmc.adapters import adapter_for
from glmc.errors import BadOption
from glmc.matching.common import move_consuming
from glmc.memory import peak_rss_gb, release_freed_memory, trim
from glmc.paths.barrier import path_curve
from glmc.paths.interpolate import Interpolation, eval_dtype
from glmc.symmetry.random import random_full_transform


def _tokens(n=4, seq=32, vocab=97, seed=0):
    ids = torch.randint(0, vocab, (n, seq + 1), generator=torch.Generator().manual_seed(seed))
    return [{"input_ids": ids[:, :-1], "targets": ids[:, 1:]}]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_interpolation_rounds_the_float32_average_once(dtype):
    a, b = tiny_gpt2(seed=0), tiny_gpt2(seed=1)
    a_before = {k: v.clone() for k, v in a.state_dict().items()}
    interp = Interpolation([a, b], dtype)
    work = dict(interp.set(0.3).named_parameters())
    for name, pa in a.named_parameters():
        pb = dict(b.named_parameters())[name]
        assert work[name].dtype == dtype
        assert torch.equal(work[name], torch.lerp(pa, pb, 0.3).to(dtype))
    assert all(torch.equal(v, a_before[k]) for k, v in a.state_dict().items())  # endpoints untouched


def test_three_endpoint_average_in_bfloat16():
    ms = [tiny_gpt2(seed=s) for s in range(3)]
    work = dict(Interpolation(ms, "bfloat16").set([0.2, 0.3, 0.5]).named_parameters())
    for name, _ in ms[0].named_parameters():
        avg = sum(w * dict(m.named_parameters())[name] for w, m in zip([0.2, 0.3, 0.5], ms))
        assert torch.allclose(work[name].float(), avg, rtol=1e-2, atol=1e-2)


def test_bfloat16_curve_is_close_to_the_float32_one():
    a, b = tiny_gpt2(seed=0), tiny_gpt2(seed=1)
    batches = _tokens()
    full = path_curve([a, b], batches, "lm", points=3, progress=False)
    half = path_curve([a, b], batches, "lm", points=3, progress=False, dtype="bfloat16")
    for x, y in zip(full["loss"], half["loss"]):
        assert abs(x - y) < 0.02 * abs(x)
    assert full["loss"] != half["loss"]  # it did run in bfloat16


def test_unknown_dtype_is_a_clear_error():
    with pytest.raises(BadOption, match="bfloat16"):
        eval_dtype("float8")


def test_consuming_move_equals_apply_and_empties_the_view():
    model = tiny_gpt2(n_layer=3)
    adapter = adapter_for(model)
    arch = adapter.arch(model)
    view = adapter.to_canonical(model)
    t = random_full_transform(arch, torch.Generator().manual_seed(0))
    expected = t.apply(view, arch)
    moved = move_consuming(dict(view), t, arch)
    assert moved.keys() == expected.keys()
    assert all(torch.equal(moved[k], expected[k]) for k in expected)
    emptied = dict(view)
    move_consuming(emptied, t, arch)
    assert emptied == {}


def test_allocator_hooks_run_and_report_memory():
    release_freed_memory()
    big = torch.ones(8 << 20)  # 32 MB: above the fixed mmap threshold
    del big
    trim()
    assert 0.01 < peak_rss_gb() < 1e4


def test_squared_norm_and_row_means_match_the_whole_tensor_formulas():
    from glmc.matching.common import squared_norm
    from glmc.view.canonical import _row_means

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(5000, 96, generator=g), torch.randn(5000, 96, generator=g)
    for a, b in ((x, None), (x, y), (x[0], y[0]), (x.reshape(50, 100, 96), y.reshape(50, 100, 96))):
        ref = float(torch.linalg.vector_norm((a if b is None else a - b).double()) ** 2)
        assert squared_norm(a, b) == pytest.approx(ref, rel=1e-6)
    assert torch.equal(_row_means(x, rows_elements=1000), x.mean(-1, keepdim=True, dtype=torch.float64))


def test_file_pages_are_released_without_changing_weights_or_logits(tmp_path):
    from glmc.matching.common import canonical_cpu_view
    from glmc.memory import FilePages, paged_forward
    from glmc.models import load_model, save_model
    from glmc.view.model_ops import logits

    model = tiny_gpt2(seed=0)
    save_model(model, tmp_path / "m")
    loaded, _ = load_model(tmp_path / "m")
    x = torch.randint(0, loaded.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    ref = logits(model, x)
    pages = FilePages()
    mapped = [t for t in loaded.state_dict().values()
              if any(s <= t.data_ptr() < e for s, e in pages.ranges)]
    if not mapped:
        pytest.skip("this platform does not map safetensors checkpoints")
    assert pages.release(mapped) > 0
    assert pages.release(torch.zeros(1000)) == 0  # anonymous memory is left alone
    with paged_forward(loaded):
        assert torch.equal(logits(loaded, x), ref)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in loaded.state_dict().items())
    adapter = adapter_for(loaded)
    view = canonical_cpu_view(adapter, loaded)
    assert all(v.dtype == torch.float32 and v.device.type == "cpu" for v in view.values())
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in loaded.state_dict().items())


def test_released_file_pages_keep_a_modified_copy(tmp_path):
    """Unmodified file pages are dropped (the page cache serves them again); a written (copy-on-write) page must
    keep what was written."""
    from glmc.memory import FilePages
    from glmc.models import load_model, save_model

    save_model(tiny_gpt2(seed=0), tmp_path / "m")
    loaded, _ = load_model(tmp_path / "m")
    pages = FilePages()
    mapped = [t for t in loaded.state_dict().values() if any(s <= t.data_ptr() < e for s, e in pages.ranges)]
    if not mapped:
        pytest.skip("this platform does not map safetensors checkpoints")
    big = max(mapped, key=lambda t: t.numel())
    before = big.clone()
    with torch.no_grad():
        big.view(-1)[0] += 1.0
    assert pages.release(mapped) > 0
    assert big.view(-1)[0] == before.view(-1)[0] + 1.0
    assert torch.equal(big.view(-1)[1:], before.view(-1)[1:])


def test_parked_tensors_keep_their_values_and_live_in_a_file_mapping():
    from glmc.memory import park

    g = torch.Generator().manual_seed(0)
    view = {"big": torch.randn(300, 70, generator=g), "small": torch.randn(5, generator=g)}
    before = {k: v.clone() for k, v in view.items()}
    small = view["small"]
    parked = park(view, ["big", "small", "absent"], min_elements=1000)
    if not parked:
        pytest.skip("nothing is parked on this platform (not Linux, or the temporary directory is in memory)")
    assert parked == ["big"] and view["small"] is small
    assert all(torch.equal(view[k], before[k]) for k in view)
    lo = view["big"].data_ptr()
    maps = [line.split() for line in open("/proc/self/maps")]
    owner = [m for m in maps if int(m[0].split("-")[0], 16) <= lo < int(m[0].split("-")[1], 16)]
    assert owner and "glmc-park-" in " ".join(owner[0][5:])  # file-backed (the file itself is already unlinked)
    view["big"] += 1.0  # a private mapping: writable, and the file is never written back
    assert torch.equal(view["big"], before["big"] + 1.0)


def test_per_head_fit_gradient_in_closed_form_is_autograds():
    """FactorGrams.loss_and_grad's closed form (D = C^-T, so a gradient G_D in D is −D·G_Dᵀ·D in C) against
    autograd through the inverse; and a big batch's float32 search still returns float64 maps no worse than its
    start."""
    from glmc.symmetry.solvers import FactorGrams, fit_factor_grams

    g = torch.Generator().manual_seed(0)
    xa, xb, ya, yb = (torch.randn(5, 8, 20, dtype=torch.float64, generator=g) for _ in range(4))
    grams = FactorGrams(xa, xb, ya, yb)
    c = (torch.eye(8, dtype=torch.float64) + 0.3 * torch.randn(5, 8, 8, dtype=torch.float64, generator=g))
    c.requires_grad_(True)
    grams.loss(c).sum().backward()
    loss, grad = grams.loss_and_grad(c.detach())
    assert torch.allclose(loss, grams.loss(c.detach()))
    assert torch.allclose(grad, c.grad, rtol=1e-10, atol=1e-10)
    big = FactorGrams(*(torch.randn(40, 64, 80, dtype=torch.float64, generator=g) for _ in range(4)))  # float32 search
    maps = fit_factor_grams(big, steps=5)
    start = big.starts()[0]
    assert maps.dtype == torch.float64 and (big.loss(maps) <= big.loss(start) + 1e-12).all()
