"""Where a sweep's cells run: processes of this machine, a Ray cluster, or Slurm through submitit.

Every executor runs the same unit of work, `run_cell(CellTask)`: one `glmc barrier` in its own Python process
(its own peak memory; a crash loses that cell only), which writes the cell store's files itself:

    OUT/cells/NAME.json    the finished cell, written atomically (a file that exists is a finished cell)
    OUT/cells/NAME.log     the cell process's stdout and stderr
    OUT/cells/NAME.error   a failed cell's last lines (removed when the cell later succeeds)

so the store and its resume rule are the same whatever ran the cell: a cell finished on this machine is not
rerun on Ray, and the other way round. On a cluster OUT and the models must be on a file system every node sees,
as for any cluster job.

- `local`: `jobs` cells at a time, each with cores / jobs torch threads.
- `ray`: each cell a Ray task with the declared resources (cpus, gpus, memory), on the cluster at `address`
  ("auto": the one `ray start` set up on this node), or on a local cluster started here bound to the loopback
  address with usage statistics off. Results stream back as tasks finish.
- `slurm`: one job array through submitit (partition, time, GPUs per cell, at most `max_parallel` at once, any
  extra sbatch options); the command returns after submission, and OUT/slurm/jobs.json records each cell's job.
- `submitit-local`: the same submitit path with its LocalExecutor (each cell a job pickled and launched by
  submitit on this machine, `jobs` at a time), waited for: how the Slurm path is tested where no Slurm cluster
  runs.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from glmc.errors import BadOption
from glmc.io import atomic_path

EXECUTORS = ("local", "ray", "slurm", "submitit-local")
LOG_TAIL = 20  # lines of a failed cell's output kept in its .error file


@dataclass(frozen=True)
class Resources:
    """What one cell asks of a cluster: CPU cores (also its torch threads), GPUs and memory in GB (None: the
    executor's default: 1 core, no GPU, no memory reservation)."""
    cpus: int | None = None
    gpus: float | None = None
    memory_gb: float | None = None


@dataclass(frozen=True)
class SlurmOptions:
    """The sbatch settings of a `slurm` sweep: partition, time limit per cell (minutes), GPUs per cell, array
    tasks running at once, and free-form extra options (`{"account": "abc", "qos": "high"}` -> #SBATCH --account=abc
    --qos=high)."""
    partition: str | None = None
    time: int = 60
    gpus_per_cell: int | None = None
    max_parallel: int = 64
    options: dict = field(default_factory=dict)


NO_RESOURCES, SLURM_DEFAULTS = Resources(), SlurmOptions()


@dataclass(frozen=True)
class CellTask:
    """Everything one cell's process needs (picklable: it travels to Ray workers and Slurm nodes)."""
    name: str
    store: str  # OUT/cells
    args: tuple  # the glmc command line after `glmc`: ("barrier", A, B, "--align", METHOD, …)
    threads: int = 1

    @property
    def target(self) -> Path:
        return Path(self.store) / f"{self.name}.json"


def run_cell(task: CellTask) -> dict:
    """Run one cell in its own process; {"name", "ok", "message", "seconds"}. Never raises for a failed cell."""
    target = task.target
    log, error = target.with_suffix(".log"), target.with_suffix(".error")
    cmd = [sys.executable, "-m", "glmc.cli.sweep_cell", str(target), *task.args]
    env = {**os.environ, "OMP_NUM_THREADS": str(task.threads), "MKL_NUM_THREADS": str(task.threads),
           "GLMC_THREADS": str(task.threads), "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    with open(log, "w") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    seconds = time.perf_counter() - t0
    if code != 0 or not target.is_file():
        lines = log.read_text(errors="replace").strip().splitlines()
        tail = "\n".join(lines[-LOG_TAIL:])
        error.write_text(tail + "\n")
        last = lines[-1] if len(lines) > 1 else f"exit code {code}"
        return {"name": task.name, "ok": False, "message": f"FAILED ({last})", "seconds": seconds}
    error.unlink(missing_ok=True)
    r = json.loads(target.read_text())
    m = next(iter(r["results"].values()))
    se = m.get("loss_barrier_se")
    return {"name": task.name, "ok": True, "seconds": seconds,
            "message": f"barrier {m['loss_barrier']:.4f}" + (f" ± {se:.4f}" if se is not None else "") +
            f" ({seconds:.1f} s, peak {r['resources']['peak_rss_mb']:.0f} MB)"}


Done = Callable[[dict], None]


class LocalExecutor:
    """`jobs` cells at a time on this machine, each in its own process."""
    name = "local"
    waits = True

    def __init__(self, jobs: int = 1):
        self.jobs = jobs

    def run(self, tasks: list[CellTask], done: Done, out: Path) -> dict:
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            for fut in as_completed([pool.submit(run_cell, t) for t in tasks]):
                done(fut.result())
        return {}


class RayExecutor:
    """Each cell a Ray task with the declared resources; see the module docstring."""
    name = "ray"
    waits = True

    def __init__(self, address: str | None = None, resources: Resources = NO_RESOURCES):
        self.address, self.resources = address, resources

    def run(self, tasks: list[CellTask], done: Done, out: Path) -> dict:
        ray = _import("ray", "ray")
        started_here = not ray.is_initialized()
        if started_here:
            start_ray(ray, self.address)
        try:
            r = self.resources
            declared = {"num_cpus": r.cpus or 1, "num_gpus": r.gpus or 0, "max_retries": 0}
            if r.memory_gb:
                declared["memory"] = int(r.memory_gb * 2**30)
            remote = ray.remote(**declared)(run_cell)
            pending = {remote.remote(t): t for t in tasks}
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                task = pending.pop(ready[0])
                try:
                    done(ray.get(ready[0]))
                except ray.exceptions.RayError as e:  # the worker died (killed, out of memory): that cell only
                    task.target.with_suffix(".error").write_text(f"ray: {type(e).__name__}: {e}\n")
                    done({"name": task.name, "ok": False, "message": f"FAILED (ray: {type(e).__name__})",
                          "seconds": 0.0})
        finally:
            if started_here:
                ray.shutdown()
        return {"ray_address": self.address or "local"}


def start_ray(ray, address: str | None) -> None:
    """Connect to the cluster at `address`, or start a local one: loopback only, no dashboard, no usage
    statistics (nothing leaves this machine)."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    if address:
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError) as e:
            raise BadOption(f"cannot reach the Ray cluster at {address} ({str(e).splitlines()[0]}); start it with "
                            "`ray start --head` or drop --ray-address to run a local one") from None
        return
    ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False, configure_logging=False,
             num_cpus=os.cpu_count() or 1)


class SubmititExecutor:
    """A submitit job array on Slurm (returns after submission unless told to wait), or each cell a job of
    submitit's LocalExecutor, `jobs` at a time (it starts every job it is given at once), waited for."""

    def __init__(self, cluster: str = "slurm", resources: Resources = NO_RESOURCES,
                 slurm: SlurmOptions = SLURM_DEFAULTS, wait: bool | None = None, jobs: int = 1):
        self.cluster, self.resources, self.slurm, self.jobs = cluster, resources, slurm, jobs
        self.name = "slurm" if cluster == "slurm" else "submitit-local"
        self.waits = (cluster != "slurm") if wait is None else wait

    def executor(self, folder: Path):
        submitit = _import("submitit", "slurm")
        r, s = self.resources, self.slurm
        if self.cluster != "slurm":
            ex = submitit.LocalExecutor(folder=folder)
            ex.update_parameters(timeout_min=s.time)
            return ex
        try:
            ex = submitit.SlurmExecutor(folder=folder)
        except RuntimeError as e:  # no srun: not on a Slurm cluster's login node
            raise BadOption(f"--executor slurm: {e} (run the sweep from a Slurm login node)") from None
        params: dict = {"job_name": "glmc-sweep", "time": s.time, "array_parallelism": s.max_parallel,
                        "cpus_per_task": r.cpus or 1}
        if s.partition:
            params["partition"] = s.partition
        if s.gpus_per_cell:
            params["gpus_per_node"] = s.gpus_per_cell
        if r.memory_gb:
            params["mem"] = f"{int(r.memory_gb)}GB"
        if s.options:
            params["additional_parameters"] = dict(s.options)
        try:
            ex.update_parameters(**params)
        except ValueError as e:
            raise BadOption(f"--executor slurm: {str(e).splitlines()[0]}") from None
        return ex

    def run(self, tasks: list[CellTask], done: Done, out: Path) -> dict:
        folder = out / ("slurm" if self.cluster == "slurm" else "submitit")
        ex = self.executor(folder / "%j")
        if self.cluster == "slurm":
            jobs = ex.map_array(run_cell, tasks)
            submitted = self._record(folder, {t.name: j.job_id for t, j in zip(tasks, jobs)})
            if self.waits:
                for job in _import("submitit", "slurm").helpers.as_completed(jobs):
                    self._finished(job, dict(zip(jobs, tasks))[job], done)
            return {"submitted": submitted}
        pending, running, submitted = list(tasks), {}, {}
        while pending or running:
            while pending and len(running) < max(1, self.jobs):
                task = pending.pop(0)
                job = ex.submit(run_cell, task)
                running[job], submitted[task.name] = task, job.job_id
            self._record(folder, submitted)
            job = next(_import("submitit", "slurm").helpers.as_completed(list(running)))
            self._finished(job, running.pop(job), done)
        return {"submitted": submitted}

    @staticmethod
    def _record(folder: Path, submitted: dict) -> dict:
        """Add cell -> job id to FOLDER/jobs.json (what `glmc sweep --status` and a rerun read)."""
        record = folder / "jobs.json"
        known = json.loads(record.read_text()) if record.is_file() else {}
        with atomic_path(record) as tmp:
            tmp.write_text(json.dumps({**known, **submitted}, indent=1) + "\n")
        return submitted

    @staticmethod
    def _finished(job, task: CellTask, done: Done) -> None:
        try:
            done(job.result())
        except Exception as e:  # the job itself failed (not the cell's process): that cell only
            task.target.with_suffix(".error").write_text(f"submitit: {type(e).__name__}: {e}\n")
            done({"name": task.name, "ok": False, "message": f"FAILED (submitit job {job.job_id})", "seconds": 0.0})


def job_states(out: Path) -> dict:
    """cell name -> the state of its submitted Slurm job ("PENDING", "RUNNING", … from sacct; "UNKNOWN" where
    sacct cannot say), for the cells OUT/slurm/jobs.json records."""
    record = out / "slurm" / "jobs.json"
    if not record.is_file():
        return {}
    submitted = json.loads(record.read_text())
    try:
        import submitit
    except ImportError:
        return {name: "UNKNOWN" for name in submitted}
    states = {}
    for name, job_id in submitted.items():
        try:
            states[name] = submitit.SlurmJob(folder=out / "slurm" / "%j", job_id=job_id).state
        except Exception:  # sacct missing or failing: the state is unknown, the job may still run
            states[name] = "UNKNOWN"
    return states


ACTIVE = ("PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "RESIZING", "SUSPENDED", "UNKNOWN")


def make_executor(kind: str, jobs: int = 1, resources: Resources = NO_RESOURCES, ray_address: str | None = None,
                  slurm: SlurmOptions = SLURM_DEFAULTS, wait: bool | None = None):
    """The executor named `kind` (EXECUTORS), refused in one line when its extra is not installed."""
    if kind == "local":
        return LocalExecutor(jobs)
    if kind == "ray":
        _import("ray", "ray")
        return RayExecutor(ray_address, resources)
    if kind in ("slurm", "submitit-local"):
        _import("submitit", "slurm")
        return SubmititExecutor("slurm" if kind == "slurm" else "local", resources, slurm, wait, jobs)
    raise BadOption(f"unknown executor {kind!r}; choose from {', '.join(EXECUTORS)}")


def _import(module: str, extra: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise BadOption(f"the {extra} executor needs {module}: pip install 'glmc[{extra}]'") from None


def describe(executor) -> dict:
    """The executor's settings, for the sweep's provenance."""
    out = {"executor": executor.name}
    for key in ("jobs", "address", "resources", "slurm"):
        value = getattr(executor, key, None)
        if value is not None:
            out[key] = asdict(value) if hasattr(value, "__dataclass_fields__") else value
    return out
