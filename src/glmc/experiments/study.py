"""A study: one sweep's grid, options and executor, from keywords (`glmc.sweep`) or one YAML file
(`glmc sweep --file study.yaml`), run resumably on any executor (glmc/experiments/executors.py).

A sweep file (every key optional but the grid; docs/guide/sweeps.md has a PolyPythias-shaped example):

    name: pythia-160m-seeds            # a label for the study
    out: runs/study                    # the sweep folder (-o on the command line wins)
    models: [ORG/pythia-160m-seed1, …] # folders or hub ids (the local Hugging Face cache); with
    revisions: [step0, step1000, …]    #   revisions: every pair at every revision (seeds × checkpoints)
    pairs: all                         # all: every pair of models; reference: each against the first
    checkpoints: [runs/s0, runs/s1, …] # instead of models: `glmc train --save-every` runs (seeds), every pair
                                       #   (or each against the first) at every step they all kept
    at: {step100: [dirA, dirB], …}     # or: a pair of folders per step
    methods: [none, weight, learned]
    data: shakespeare                  # default: model A's glmc.json
    options: {max_batches: 20, steps: 300, …}   # any option of glmc/options.py's barrier and method classes
    executor:
      kind: local | ray | slurm | submitit-local
      jobs: 2                          # local: cells at once
      ray_address: auto                # ray: a running cluster (default: a local one on the loopback address)
      resources: {cpus: 8, gpus: 1, memory_gb: 32}   # per cell (Ray tasks, Slurm jobs)
      slurm: {partition: gpu, time: 120, gpus_per_cell: 1, max_parallel: 50, options: {account: lab}}
      wait: false                      # slurm: return after submission (the default) or wait for the jobs
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from glmc.errors import BadCheckpoint, BadOption
from glmc.experiments import sweep as sw
from glmc.experiments.executors import (
    EXECUTORS,
    NO_RESOURCES,
    SLURM_DEFAULTS,
    Resources,
    SlurmOptions,
    describe,
    make_executor,
)
from glmc.io import read_yaml
from glmc.methods import names as available_methods
from glmc.models.hub import snapshot
from glmc.provenance import provenance

# what a study compares unless it says otherwise: the raw pair and data-free weight matching
DEFAULT_METHODS = ("none", "weight")


@dataclass
class Study:
    """One sweep: which pairs (models [+ revisions], checkpoints or at), methods, options and where it runs."""
    out: Path | None = None
    models: list = field(default_factory=list)
    revisions: list | None = None
    reference: bool = False
    checkpoints: tuple | None = None
    at: dict | None = None
    methods: list = field(default_factory=lambda: list(DEFAULT_METHODS))
    options: dict = field(default_factory=dict)
    executor: str = "local"
    jobs: int = 1
    resources: Resources = NO_RESOURCES
    ray_address: str | None = None
    slurm: SlurmOptions = SLURM_DEFAULTS
    wait: bool | None = None
    name: str = ""

    def grid(self) -> tuple[str, list[sw.Cell]]:
        """("seeds" | "checkpoints", the cells), or BadOption / BadCheckpoint naming what is wrong."""
        given = [bool(self.checkpoints), bool(self.at), self.revisions is not None]
        if sum(given) > 1:
            raise BadOption("give one of checkpoints, at and revisions")
        if self.checkpoints:
            if self.models:
                raise BadOption("checkpoints takes the two runs itself; drop the models")
            cells = sw.runs_cells(list(self.checkpoints), self.methods, self.reference)
            if not cells:
                raise BadCheckpoint(f"{' and '.join(map(str, self.checkpoints))} share no checkpoints/stepN folder; "
                                    "train each with `glmc train … --save-every K`")
            return "checkpoints", cells
        if self.at:
            if self.models:
                raise BadOption("at gives the pairs itself; drop the models")
            for step, pair in self.at.items():
                for d in pair:
                    if not Path(d).is_dir():
                        raise BadCheckpoint(f"at {step}: {d} is not a directory")
            return "checkpoints", sw.step_cells({k: tuple(v) for k, v in self.at.items()}, self.methods)
        if len(self.models) < 2:
            raise BadOption("give at least two models (or checkpoints, revisions or at)")
        if self.revisions is not None:

            if not self.revisions:
                raise BadOption("revisions is empty: give at least one")
            return "checkpoints", sw.revision_cells(self.models, sw.model_labels(self.models), self.revisions,
                                                    self.methods, self.reference, resolve=snapshot)
        missing = [m for m in self.models if not Path(m).is_dir()]
        if missing:
            raise BadCheckpoint(f"{missing[0]} is not a directory (hub ids need revisions; a single cached "
                                "revision: ORG/NAME@REV with --revisions REV)")
        return "seeds", sw.seed_cells(list(self.models), self.methods, self.reference)


@dataclass
class SweepResult:
    """What `glmc.sweep` returns: the sweep folder, the grid's kind, one row per cell (sweep.COLUMNS), each cell's
    state (done, running, pending, submitted, failed, missing) and, for a Slurm sweep, the submitted job ids."""
    out: Path
    kind: str
    rows: list
    states: dict
    submitted: dict = field(default_factory=dict)

    @property
    def failed(self) -> int:
        """How many cells failed (their .error files say why; a rerun retries them)."""
        return sum(s == "failed" for s in self.states.values())

    @property
    def done(self) -> bool:
        """Whether every cell has finished."""
        return all(s == "done" for s in self.states.values())

    def table(self) -> str:
        """The printed table: one line per cell, whole pair names."""
        return sw.summary(self.rows)

    def __repr__(self) -> str:
        counts = {s: list(self.states.values()).count(s) for s in sw.STATES}
        shown = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        return f"glmc.SweepResult({self.kind}, {len(self.rows)} cells: {shown}; {self.out})"


def run_study(study: Study, progress: bool = True, log=print) -> SweepResult:
    """Run every cell of `study` not finished yet (see the module docstring of glmc/experiments/sweep.py for the
    folder), on its executor; write the table and plots once every cell has ended. Returns a SweepResult."""
    if study.out is None:
        raise BadOption("give the sweep folder (-o OUT, or out: in the sweep file)")
    out = Path(study.out)
    kind, cells = study.grid()
    args = sw.barrier_args(study.options)
    sw.check_grid(cells, data=study.options.get("data"))
    executor = make_executor(study.executor, study.jobs, study.resources, study.ray_address, study.slurm, study.wait)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    sw.write_plan(out, kind, cells, args, {**describe(executor), "name": study.name})
    states = sw.cell_states(out, cells)
    todo = [c for c in cells if states[c.name] in ("failed", "missing")]
    active = sum(s in sw.ACTIVE_STATES for s in states.values())
    done = list(states.values()).count("done")
    # a cell's torch threads: its declared cores, else this machine's shared by the cells running at once here
    local = study.executor in ("local", "submitit-local")
    threads = study.resources.cpus or (max(1, _cores() // study.jobs) if local else 1)
    log(f"{len(cells)} cells ({kind}); {done} already finished (kept)"
        + (f", {active} submitted and not ended (left alone)" if active else "")
        + f"; {len(todo)} to run on {executor.name}")
    submitted: dict = {}
    if todo:
        info = executor.run(sw.tasks_for(todo, out, args, threads), _reporter(todo, progress, log), out)
        submitted = info.get("submitted", {})
    states = sw.cell_states(out, cells)
    rows = sw.rows_for(out, cells)
    if not executor.waits and any(s in sw.ACTIVE_STATES for s in states.values()):
        log(f"submitted {len(submitted)} cell(s); see `glmc sweep --status {out}`, and rerun the same command to "
            "collect the table and resubmit failed or missing cells")
        return SweepResult(out, kind, rows, states, submitted)
    write_outputs(out, kind, cells, rows, study, describe(executor), log)
    return SweepResult(out, kind, rows, states, submitted)


def write_outputs(out: Path, kind: str, cells, rows, study: Study, executor: dict, log=print) -> None:
    meta = {"name": study.name, "methods": study.methods, "options": study.options, "cells": len(cells),
            "failed": sum(r["status"] != "ok" for r in rows), "executor": executor,
            "provenance": provenance(options=study.options, data=study.options.get("data"),
                                     models=list(dict.fromkeys(p for c in cells for p in (c.model_a, c.model_b))))}
    for p in sw.write_table(rows, out, kind, meta):
        log(f"wrote {p}")
    ok_rows = [r for r in rows if r["status"] == "ok"]
    if ok_rows and kind == "checkpoints":
        log(f"wrote {sw.plot_steps(ok_rows, out / 'sweep-steps.png', title='barrier along training')}")
    elif ok_rows:
        log(f"wrote {sw.plot_matrix(ok_rows, cells, out / 'sweep-matrix.png', title='barrier between seeds')}")
    log(sw.summary(rows))


def _reporter(todo, progress: bool, log):
    """The callback each finished cell calls: a progress bar (stderr) and one line per cell."""
    by_name = {c.name: c for c in todo}
    bar = None
    if progress:

        bar = tqdm(total=len(todo), desc="cells", unit="cell", leave=False)
    count = iter(range(1, len(todo) + 1))

    def done(result: dict):
        c = by_name[result["name"]]
        line = f"[{next(count)}/{len(todo)}] {c.pair} {c.step} {c.method}: {result['message']}".replace("  ", " ")
        if bar is not None:
            bar.write(line)
            bar.update()
            if bar.n == bar.total:
                bar.close()
        else:
            log(line)

    return done


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def status(out) -> tuple[str, list[sw.Cell], dict]:
    """(kind, cells, cell name -> state) of the sweep in `out`, from its plan and cell store."""
    kind, cells = sw.read_plan(Path(out))
    return kind, cells, sw.cell_states(Path(out), cells)


# ------------------------------------------------------------------------------------------ sweep files

TOP = {"name": str, "out": str, "models": list, "revisions": list, "pairs": str, "checkpoints": list, "at": dict,
       "methods": list, "data": (str, dict), "options": dict, "executor": (str, dict)}
EXECUTOR_KEYS = {"kind": str, "jobs": int, "ray_address": str, "resources": dict, "slurm": dict, "wait": bool}
RESOURCE_KEYS = {"cpus": int, "gpus": (int, float), "memory_gb": (int, float)}
SLURM_KEYS = {"partition": str, "time": int, "gpus_per_cell": int, "max_parallel": int, "options": dict}


def load_study(path) -> Study:
    """A Study from a sweep file; BadOption naming the file and the key for anything wrong in it."""
    p = Path(path)
    doc = read_yaml(p, "sweep file")
    if not isinstance(doc, dict):
        raise BadOption(f"{path}: a sweep file is a mapping of keys (models, methods, …), got {_kind(doc)}")
    _keys(path, "", doc, TOP)
    ex = doc.get("executor", "local")
    ex = {"kind": ex} if isinstance(ex, str) else ex
    _keys(path, "executor.", ex, EXECUTOR_KEYS)
    kind = ex.get("kind", "local")
    if kind not in EXECUTORS:
        raise BadOption(f"{path}: executor.kind must be one of {', '.join(EXECUTORS)}, got {kind!r}")
    res = ex.get("resources", {})
    _keys(path, "executor.resources.", res, RESOURCE_KEYS)
    slurm = ex.get("slurm", {})
    _keys(path, "executor.slurm.", slurm, SLURM_KEYS)
    pairs = doc.get("pairs", "all")
    if pairs not in ("all", "reference"):
        raise BadOption(f"{path}: pairs must be 'all' or 'reference', got {pairs!r}")
    for key in ("models", "revisions", "methods", "checkpoints"):
        if key in doc and not all(isinstance(v, (str, int)) for v in doc[key]):
            raise BadOption(f"{path}: {key} must be a list of names, got {doc[key]!r}")
    if "checkpoints" in doc and len(doc["checkpoints"]) < 2:
        raise BadOption(f"{path}: checkpoints must name at least two runs, got {len(doc['checkpoints'])}")
    options = dict(doc.get("options") or {})
    if "data" in doc:
        options["data"] = doc["data"]
    try:
        sw.barrier_args(options)
    except BadOption as e:
        raise BadOption(f"{path}: options: {e}") from None
    methods = [str(m) for m in doc.get("methods", DEFAULT_METHODS)]
    bad = [m for m in methods if m not in available_methods()]
    if bad or not methods:
        raise BadOption(f"{path}: methods: " + (f"unknown method {bad[0]!r}" if bad else "none given") +
                        f"; choose from {', '.join(available_methods())}")
    base = p.parent
    return Study(out=Path(doc["out"]) if "out" in doc else None,
                 models=[_local(base, str(m)) for m in doc.get("models", [])],
                 revisions=[str(r) for r in doc["revisions"]] if "revisions" in doc else None,
                 reference=pairs == "reference",
                 checkpoints=tuple(_local(base, str(c)) for c in doc["checkpoints"]) if "checkpoints" in doc
                 else None,
                 at={str(k): tuple(_local(base, str(x)) for x in v) for k, v in doc["at"].items()} if "at" in doc
                 else None,
                 methods=methods, options=options, executor=kind, jobs=ex.get("jobs", 1),
                 resources=Resources(**res), ray_address=ex.get("ray_address"),
                 slurm=SlurmOptions(**{**slurm, "options": dict(slurm.get("options") or {})}),
                 wait=ex.get("wait"), name=str(doc.get("name", p.stem)))


def _local(base: Path, text: str) -> str:
    """A model given relative to the sweep file's folder, when it exists there; else as written (a hub id, or a
    path relative to where the command runs)."""
    candidate = base / text
    return str(candidate) if not Path(text).is_absolute() and candidate.exists() and not Path(text).exists() \
        else text


def _keys(path, prefix: str, doc: dict, schema: dict) -> None:
    if not isinstance(doc, dict):
        raise BadOption(f"{path}: {prefix.rstrip('.')} must be a mapping, got {_kind(doc)}")
    for key, value in doc.items():
        if key not in schema:
            raise BadOption(f"{path}: unknown key {prefix}{key} (known: {', '.join(schema)})")
        want = schema[key]
        if value is not None and not isinstance(value, want) or isinstance(value, bool) and want in (int, (int, float)):
            names = " or ".join(t.__name__ for t in (want if isinstance(want, tuple) else (want,)))
            raise BadOption(f"{path}: {prefix}{key} must be a {names}, got {_kind(value)} {value!r}")


def _kind(value) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", int: "an integer", float: "a number",
            bool: "a boolean", type(None): "nothing"}.get(type(value), type(value).__name__)


def to_yaml(study: Study) -> str:
    """The sweep file of `study` (what `glmc sweep … --save-file` writes)."""
    import yaml

    doc: dict = {"name": study.name or None, "models": study.models or None, "revisions": study.revisions,
                 "pairs": "reference" if study.reference else None,
                 "checkpoints": list(study.checkpoints) if study.checkpoints else None,
                 "at": {k: list(v) for k, v in study.at.items()} if study.at else None, "methods": study.methods,
                 "options": study.options or None,
                 "executor": {"kind": study.executor, "jobs": study.jobs if study.jobs != 1 else None,
                              "ray_address": study.ray_address,
                              "resources": {k: v for k, v in dataclasses.asdict(study.resources).items()
                                            if v is not None} or None,
                              "slurm": dataclasses.asdict(study.slurm) if study.executor == "slurm" else None}}
    doc["executor"] = {k: v for k, v in doc["executor"].items() if v is not None}
    return yaml.safe_dump(json.loads(json.dumps({k: v for k, v in doc.items() if v is not None})), sort_keys=False)


def sweep(models=(), *, out=None, methods=DEFAULT_METHODS, revisions=None, reference: bool = False,
          checkpoints=None, at=None, file=None, data=None, options: dict | None = None, executor: str | None = None,
          jobs: int | None = None, resources: Resources | dict | None = None, ray_address: str | None = None,
          slurm: SlurmOptions | dict | None = None, wait: bool | None = None, progress: bool = True,
          log=print) -> SweepResult:
    """Barriers over a grid of model pairs × alignment methods, each cell `glmc barrier` in its own process, on
    this machine, a Ray cluster or Slurm; resumable (a finished cell is never recomputed, whichever executor
    finished it).

    Args:
        models: folders or hub ids: every pair (or each against the first, `reference`); with `revisions`, every
            pair at every revision of the local Hugging Face cache (seeds × checkpoints).
        checkpoints: two or more `glmc train --save-every` runs (seeds): every pair (or each against the first,
            `reference`) at every step they all kept. at: {step: (dir_a, dir_b)}.
        file: a sweep file (glmc/experiments/study.py) instead of the grid keywords; `out` and the executor
            keywords given here override the file's.
        methods: alignment methods, one column each. data, options: the cells' data and any barrier or method
            option (glmc/options.py field names: points, max_batches, steps, iterations, …).
        executor: "local" (default), "ray", "slurm" or "submitit-local"; jobs: local cells at once;
            resources: per cell {cpus, gpus, memory_gb}; ray_address: a running Ray cluster ("auto"; default: a
            local one); slurm: {partition, time (minutes), gpus_per_cell, max_parallel, options (extra sbatch
            options)}; wait: for slurm, wait for the jobs instead of returning after submission.

    Returns:
        A `SweepResult` (rows, per-cell states, submitted job ids); the folder `out` holds cells/, plan.json,
        sweep.json/.csv/.parquet (with provenance) and the plot.
    """
    if file is not None:
        study = load_study(file)
    else:
        study = Study(models=[str(m) for m in models], revisions=list(revisions) if revisions is not None else None,
                      reference=reference, checkpoints=tuple(str(c) for c in checkpoints) if checkpoints else None,
                      at={str(k): tuple(str(x) for x in v) for k, v in at.items()} if at else None,
                      methods=list(methods), options=dict(options or {}))
        if data is not None:
            study.options["data"] = data
        bad = [m for m in study.methods if m not in available_methods()]
        if bad or not study.methods:
            raise BadOption((f"unknown method {bad[0]!r}" if bad else "no method given") +
                            f"; choose from {', '.join(available_methods())}")
    if out is not None:
        study.out = Path(out)
    for key, value in (("executor", executor), ("jobs", jobs), ("ray_address", ray_address), ("wait", wait)):
        if value is not None:
            setattr(study, key, value)
    if resources is not None:
        study.resources = resources if isinstance(resources, Resources) else Resources(**resources)
    if slurm is not None:
        study.slurm = slurm if isinstance(slurm, SlurmOptions) else SlurmOptions(**slurm)
    if study.executor not in EXECUTORS:
        raise BadOption(f"unknown executor {study.executor!r}; choose from {', '.join(EXECUTORS)}")
    return run_study(study, progress=progress, log=log)
