"""What lets glmc run on big checkpoints without changing a result: low-precision evaluation of the path,
the consuming transform of `finish`, and the allocator hooks of glmc/memory.py."""

import pytest
import torch

from conftest import tiny_gpt2
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
