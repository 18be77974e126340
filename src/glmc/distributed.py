"""Many processes under `accelerate launch` (or torchrun, or an MPI launcher): who this process is, its share of a
batch, and sums across processes.

Data parallelism only: every process holds the whole models, takes a contiguous share of the rows of every batch,
and adds its sums (loss, correct predictions, counted predictions; gradients) to the other processes'. Sums over
rows do not depend on how the rows are split, so every process gets the single-process figures up to the order of
float additions, and identical figures on every process, so processes that take the same decisions from them (the
best validation state, early stopping) stay in lockstep.

In one process (no launcher, or a launcher with one process) every function here is the identity or a constant,
and accelerate is never imported. Under a launcher, accelerate's `PartialState` sets up the process group on first
use: gloo on CPUs, NCCL on GPUs, each process on its own GPU (cuda:LOCAL_RANK).
"""

from __future__ import annotations

import functools
import os

import torch
import torch.distributed as dist
from accelerate import PartialState

# where launchers put the world size and this process's ranks: torchrun and `accelerate launch` set the first of
# each; MPI launchers (`accelerate launch --mpirun_hostfile`) the others (the variables accelerate reads)
WORLD_SIZE_ENV = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
RANK_ENV = ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")
LOCAL_RANK_ENV = ("LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK")


def _env_int(names, default: int) -> int:
    for name in names:
        value = os.environ.get(name, "")
        if value.strip():
            return int(value)
    return default


def launched() -> bool:
    """True when a launcher started more than one process (read from the environment; initialises nothing)."""
    return world_size() > 1


def world_size() -> int:
    return _env_int(WORLD_SIZE_ENV, 1)


def rank() -> int:
    return _env_int(RANK_ENV, 0) if launched() else 0


def local_rank() -> int:
    return _env_int(LOCAL_RANK_ENV, 0) if launched() else 0


def is_main() -> bool:
    """Whether this process writes files and prints (rank 0; always true in one process)."""
    return rank() == 0


def _cpu_only() -> bool:
    # `accelerate launch --cpu` sets ACCELERATE_USE_CPU; without CUDA there is nothing else to run on
    flag = os.environ.get("ACCELERATE_USE_CPU", "").strip().lower() in ("1", "true", "yes")
    return flag or not torch.cuda.is_available()


@functools.cache
def _state():
    """accelerate's PartialState: initialises the process group once, the first time a process needs it."""
    return PartialState(cpu=_cpu_only())


def device():
    """This process's own device under a launcher: cuda:LOCAL_RANK on GPUs, else the CPU."""
    if not launched():
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    d = _state().device
    return torch.device("cpu") if d.type == "cpu" else d  # accelerate says cpu:0, which != cpu for torch


def _comm_device():
    """Where collectives run: NCCL needs the process's GPU even for the sums of a model kept on the CPU."""
    _state()
    return torch.device("cuda", local_rank()) if dist.get_backend() == "nccl" else torch.device("cpu")


def shard(batch: dict) -> dict:
    """This process's rows of a batch dict (every value has the batch on its first axis): a contiguous slice,
    the shares differing by at most one row; possibly empty when the batch has fewer rows than processes."""
    if not launched():
        return batch
    n = rows(batch)
    lo, hi = n * rank() // world_size(), n * (rank() + 1) // world_size()
    return {k: v[lo:hi] for k, v in batch.items()}


def rows(batch: dict) -> int:
    return len(next(iter(batch.values())))


def all_sum(values: list) -> list[float]:
    """The element-wise sums of `values` (numbers) over every process, in float64 (exact for counts < 2^53)."""
    if not launched():
        return [float(v) for v in values]
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_comm_device())
    dist.all_reduce(t)
    return t.tolist()


def any_process(flag: bool) -> bool:
    """True on every process if it is true on any: a decision every process must take together (a time budget)."""
    return all_sum([float(flag)])[0] > 0 if launched() else bool(flag)


def sum_gradients(params) -> None:
    """Replace each parameter's gradient by its sum over every process, in one collective. A gradient no process
    has stays None (as in one process, the optimizer then skips the parameter); one that only some processes have
    (an empty share of a batch) counts as zeros on the others."""
    params = list(params)
    if not launched() or not params:
        return
    comm, dtype = _comm_device(), functools.reduce(torch.promote_types, (p.dtype for p in params))
    parts = [p.grad.detach().reshape(-1).to(comm, dtype) if p.grad is not None
             else torch.zeros(p.numel(), device=comm, dtype=dtype) for p in params]
    has = torch.tensor([float(p.grad is not None) for p in params], device=comm, dtype=dtype)
    flat = torch.cat(parts + [has])
    dist.all_reduce(flat)
    sizes = [p.numel() for p in params]
    for p, g, n in zip(params, flat[:-len(params)].split(sizes), flat[-len(params):].tolist()):
        p.grad = g.reshape(p.shape).to(p.device, p.dtype) if n > 0 else None


def wait() -> None:
    """Every process waits here for the others (after the main process has written its files)."""
    if launched():
        _state().wait_for_everyone()


def close() -> None:
    """Wait for every process, then take the process group down (a clean exit for NCCL); no-op in one process."""
    if not launched():
        return

    wait()
    if dist.is_initialized():
        dist.destroy_process_group()
