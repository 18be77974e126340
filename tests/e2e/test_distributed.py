"""Many processes (glmc/distributed.py): sharding and sums in one process, the same sums and the learned-matching
step in two gloo processes (torch.multiprocessing), and the CLI under `accelerate launch` against one process."""

import json
import os
import socket
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from factories import tiny_gpt2
from glmc import distributed

LAUNCH_ENV = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE") + distributed.WORLD_SIZE_ENV[1:] \
    + distributed.RANK_ENV[1:] + distributed.LOCAL_RANK_ENV[1:]


@pytest.fixture
def one_process(monkeypatch):
    for name in LAUNCH_ENV:
        monkeypatch.delenv(name, raising=False)


def _lm_batch(rows, seed=0, length=16):
    t = torch.randint(0, 97, (rows, length + 1), generator=torch.Generator().manual_seed(seed))
    return {"input_ids": t[:, :-1], "targets": t[:, 1:]}


def test_one_process_is_the_identity(one_process):
    batch = _lm_batch(3)
    p = torch.nn.Parameter(torch.zeros(2))
    p.grad = g = torch.tensor([1.0, -2.0])
    distributed.sum_gradients([p])
    assert not distributed.launched() and distributed.is_main() and distributed.rank() == 0
    assert distributed.shard(batch) is batch and p.grad is g
    assert distributed.all_sum([3, 0.25]) == [3.0, 0.25]
    assert distributed.any_process(True) and not distributed.any_process(False)
    distributed.close()  # nothing to take down


@pytest.mark.parametrize("rows", [7, 2])
def test_shards_cover_every_row_once_in_order(monkeypatch, rows):
    monkeypatch.setenv("WORLD_SIZE", "3")
    batch = {"pixel_values": torch.arange(rows * 4.0).reshape(rows, 2, 2), "labels": torch.arange(rows)}
    parts = []
    for r in range(3):
        monkeypatch.setenv("RANK", str(r))
        parts.append(distributed.shard(batch))
    sizes = [distributed.rows(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == rows
    for key in batch:
        assert torch.equal(torch.cat([p[key] for p in parts]), batch[key])
    assert all(torch.equal(p["pixel_values"][:, 0, 0], 4.0 * p["labels"]) for p in parts)  # rows stay paired


def test_commands_that_do_not_shard_refuse_a_launch(monkeypatch, tmp_path):
    from glmc.cli import main

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    r = CliRunner().invoke(main, ["verify", str(tmp_path)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.output.strip().splitlines()[-1].startswith("Error: glmc verify runs in one process")


# ---- two gloo processes --------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _learned_steps() -> dict:
    """Two learned-matching steps on tiny GPT-2s (a 5-row batch, then a 1-row one, which leaves one of two
    processes an empty share) and a validation loss; what the steps produced."""
    from glmc.data.iterable import IterableData
    from glmc.matching.common import canonical_pair
    from glmc.matching.learned import LearnedMatcher
    from glmc.symmetry.random import random_full_transform

    adapter, arch, view_a, view_b = canonical_pair(tiny_gpt2(seed=0), tiny_gpt2(seed=1))
    init = random_full_transform(arch, torch.Generator().manual_seed(0))
    batches = [_lm_batch(5, seed=1), _lm_batch(1, seed=2)]
    m = LearnedMatcher([view_a, view_b], adapter, arch, adapter.from_canonical(view_a, tiny_gpt2(seed=0)),
                       IterableData(batches, "lm"), [init])
    opt = m.optimizer(lr=1e-2)
    out = {"loss": [], "grads": []}
    for batch, lam in zip(batches, (0.4, 0.55)):
        out["loss"].append(float(m.train_step(batch, [1 - lam, lam], opt)))
        out["grads"].append({n: p.grad.clone() for n, p in m.latents.named_parameters() if p.grad is not None})
    out["latents"] = {n: p.detach().clone() for n, p in m.latents.named_parameters()}
    out["val"] = m.mean_loss(batches, 0.5)
    return out


def _two_process_child(rank: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2", ACCELERATE_USE_CPU="true")
    torch.set_num_threads(1)
    params = [torch.nn.Parameter(torch.zeros(3)) for _ in range(3)]
    params[0].grad = torch.full((3,), rank + 1.0)
    if rank == 1:
        params[1].grad = torch.ones(3)
    distributed.sum_gradients(params)  # one gradient on both, one on rank 1 only, one on neither
    result = {"sums": distributed.all_sum([rank + 1, 0.5]), "grads": [p.grad for p in params],
              "any": [distributed.any_process(rank == 1), distributed.any_process(False)],
              "steps": _learned_steps()}
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    distributed.close()


@pytest.mark.slow
def test_two_gloo_processes_sum_and_train_like_one(tmp_path, one_process):
    torch.multiprocessing.spawn(_two_process_child, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for r in ranks:
        assert r["sums"] == [3.0, 1.0] and r["any"] == [True, False]
        assert torch.equal(r["grads"][0], torch.full((3,), 3.0)) and torch.equal(r["grads"][1], torch.ones(3))
        assert r["grads"][2] is None  # no process had one: the optimizer skips it, as in one process
    # the processes stay in lockstep: bit-identical latents and figures on both
    a, b = ranks[0]["steps"], ranks[1]["steps"]
    assert a["loss"] == b["loss"] and a["val"] == b["val"]
    assert all(torch.equal(a["latents"][n], b["latents"][n]) for n in a["latents"])
    # and they make the one-process full-batch steps (up to float summation order)
    one = _learned_steps()
    assert a["loss"] == pytest.approx(one["loss"], rel=1e-6) and a["val"] == pytest.approx(one["val"], rel=1e-6)
    for step in range(2):
        assert a["grads"][step].keys() == one["grads"][step].keys()
        for n, g in one["grads"][step].items():
            assert torch.allclose(a["grads"][step][n], g, rtol=1e-4, atol=1e-6), (step, n)
    # AdamW's first steps move each entry by about lr·sign(g), so an entry whose gradient is within float noise of 0
    # may move differently (measured: 1 of 16384 by 1.6e-4); every other entry agrees to 1e-5
    for n, z in one["latents"].items():
        diff = (a["latents"][n] - z).abs()
        assert (diff > 1e-5).float().mean() < 1e-3 and diff.max() < 0.05, n


# ---- the CLI under `accelerate launch` -----------------------------------------------------------------------

def _launch(tmp_path, *args) -> str:
    """`accelerate launch` of `python -m glmc.cli ARGS` in two CPU processes (gloo). `--cpu` would start one
    process (accelerate 1.15 starts several CPU processes only through MPI), so the torchrun launcher
    (`--multi_gpu`) runs them, with CUDA hidden."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HOME": str(tmp_path / "hf"), "GLMC_DEBUG": "1"}
    for name in LAUNCH_ENV:
        env.pop(name, None)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(_free_port()), "-m", "glmc.cli", *map(str, args)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    return r.stdout


def test_barrier_under_accelerate_launch_equals_one_process(gpt2_pair, tmp_path, one_process):
    from conftest import run_cli

    args = ["barrier", *gpt2_pair, "--align", "none,weight", "--points", 5, "--max-batches", 4, "--iterations", 3,
            "--device", "cpu", "--no-progress", "--json"]
    run_cli(*args, tmp_path / "one.json")
    out = _launch(tmp_path, *args, tmp_path / "two.json")
    assert out.count("method") == 1 and out.count("wrote") == 1  # printed by the main process only
    one, two = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("one", "two"))
    assert one["n_batches"] == two["n_batches"] == 4
    for method in ("none", "weight"):
        r1, r2 = one["results"][method], two["results"][method]
        assert r2["loss"] == pytest.approx(r1["loss"], rel=1e-5)
        assert r2["acc"] == pytest.approx(r1["acc"], abs=1e-3)
        assert r2["loss_barrier"] == pytest.approx(r1["loss_barrier"], abs=1e-5)


def test_learned_align_under_accelerate_launch_equals_one_process(gpt2_pair, tmp_path, one_process):
    from safetensors.torch import load_file

    import glmc
    from conftest import run_cli

    # lr 1e-3 (the default before 2026-12-05): Adam scales each update to ~lr whatever the gradient's size, so
    # summation-order noise in small gradients moves latents in proportion to lr; at the default 1e-2 the two runs'
    # transforms differed by more than the 1e-4 checked below
    args = ["align", *gpt2_pair, "--method", "learned", "--steps", 10, "--eval-every", 5, "--batch-size", 16,
            "--lr", 0.001, "--iterations", 3, "--device", "cpu", "--no-progress", "--out"]
    run_cli(*args, tmp_path / "one")
    _launch(tmp_path, *args, tmp_path / "two")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "hf") == ["one", "two"]  # no temporaries left
    one, two = (json.loads((tmp_path / n / "align.json").read_text()) for n in ("one", "two"))
    # learned matching keeps weight matching's permutations (perm_lr 0), so the two runs differ by float summation
    # order only: measured 2e-7
    for key in ("init_val_barrier", "best_val_barrier"):
        assert two[key] == pytest.approx(one[key], abs=1e-4), key
    assert [h["step"] for h in two["history"]] == [0, 5, 10] and two["best_step"] == one["best_step"]
    assert two["max_dlogits_b"] <= 1e-4
    t1, t2 = (load_file(tmp_path / n / "transform.safetensors") for n in ("one", "two"))
    assert t1.keys() == t2.keys() and max(float((t1[k] - t2[k]).abs().max()) for k in t1) < 1e-4
    w1, w2 = (glmc.load_model(tmp_path / n).state_dict() for n in ("one", "two"))  # B′ written whole, loadable
    assert w1.keys() == w2.keys() and max(float((w1[k] - w2[k]).abs().max()) for k in w1) < 1e-3
