"""Sweeps on every executor (local processes, a local Ray cluster, submitit's LocalExecutor, Slurm's sbatch script),
sweep files, the grid check before any cell, resume after a kill and a crashing cell (issue #46)."""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import make_cache, run_cli

SEED_RUN = ["--layers", 2, "--width", 32, "--heads", 4, "--mlp", 64, "--context", 32, "--steps", 4,
            "--eval-every", 2, "--batch-size", 8, "--save-every", 2, "--quiet"]
# each cell: 3 points on 2 batches; weight matching without candidate selection (seconds, not tens of seconds)
FAST = {"points": 3, "max_batches": 2, "batch_size": 8, "select_batches": 0}


@pytest.fixture(scope="module")
def seed_runs(tmp_path_factory):
    """Three tiny GPT-2 runs of `glmc train --save-every 2` (seeds 0-2; checkpoints step0, step2, step4)."""
    root = tmp_path_factory.mktemp("seed-runs")
    for seed in (0, 1, 2):
        run_cli("train", "gpt2", "--data", "shakespeare", "--seed", seed, "--out", root / f"s{seed}", *SEED_RUN)
    return [root / f"s{seed}" for seed in (0, 1, 2)]


def study_file(path: Path, runs, **extra) -> Path:
    doc = {"name": "three-seeds", "checkpoints": [str(r) for r in runs], "pairs": "reference",
           "methods": ["none", "weight"], "options": FAST, **extra}
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


def glmc(*args, env=None, check=True):
    """The real `glmc` command in a child process (Ray and submitit start their own processes)."""
    proc = subprocess.run([sys.executable, "-m", "glmc.cli", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def in_loopback_namespace(args: list) -> list:
    """Runs a command in a network namespace with only the loopback interface, where this user may create one
    (root, as CI is): the local Ray cluster then cannot be reached from, or reach, any other address."""
    if shutil.which("unshare") and shutil.which("ip") and os.geteuid() == 0:
        return ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *args]
    return args


def barriers(out: Path) -> dict:
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert rows and all(r["status"] == "ok" for r in rows), rows
    return {(r["pair"], r["step"], r["method"]): float(r["loss_barrier"]) for r in rows}


@pytest.mark.slow
def test_local_ray_and_submitit_give_the_same_table(seed_runs, tmp_path):
    # one pair: the executors' agreement is per cell, and each executor pays its start-up per run (the grid's
    # shapes, several pairs included, are the other tests')
    study = study_file(tmp_path / "study.yaml", seed_runs[:2])
    glmc("sweep", "--file", study, "-o", tmp_path / "local", "--jobs", 2)
    ray = subprocess.run(in_loopback_namespace([sys.executable, "-m", "glmc.cli", "sweep", "--file", str(study),
                                                "-o", str(tmp_path / "ray"), "--executor", "ray", "--cell-cpus", "1"]),
                         capture_output=True, text=True)
    assert ray.returncode == 0, ray.stdout + ray.stderr
    sub = glmc("sweep", "--file", study, "-o", tmp_path / "submitit", "--executor", "submitit-local", "--jobs", 2)
    tables = [barriers(tmp_path / name) for name in ("local", "ray", "submitit")]
    assert len(tables[0]) == 1 * 3 * 2  # 1 pair × 3 steps × 2 methods
    for other in tables[1:]:
        assert other.keys() == tables[0].keys()
        assert max(abs(other[k] - tables[0][k]) for k in other) <= 1e-6
    assert "6 to run on ray" in ray.stdout and "6 to run on submitit-local" in sub.stdout
    # submitit pickled and launched each cell as its own job: its folders hold the pickles and logs
    assert len(list((tmp_path / "submitit" / "submitit").glob("*/*_result.pkl"))) == 6
    assert len(json.loads((tmp_path / "submitit" / "submitit" / "jobs.json").read_text())) == 6
    for name in ("ray", "submitit"):
        data = json.loads((tmp_path / name / "sweep.json").read_text())
        assert data["executor"]["executor"] == ("ray" if name == "ray" else "submitit-local")
        assert data["provenance"]["versions"][name] and data["provenance"]["code"]["commit"]
        assert all((tmp_path / name / "cells" / f"{c}.log").is_file() for c in _cell_names(tmp_path / name))


def _cell_names(out: Path) -> list:
    return [c["name"] for c in json.loads((out / "plan.json").read_text())["cells"]]


def _kill_when_cells_exist(cmd: list, out: Path, how=signal.SIGKILL) -> set:
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    while time.time() < deadline and len(list((out / "cells").glob("[!.]*.json"))) < 2:
        assert proc.poll() is None, proc.stdout.read().decode()
        time.sleep(0.2)
    os.killpg(proc.pid, how)  # the sweep and its running cells, mid-run
    proc.wait(timeout=120)
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (out / "cells").glob("[!.]*.json")}


@pytest.mark.slow
@pytest.mark.parametrize("first, then", [("ray", "local"), ("submitit-local", "ray")])
def test_a_killed_sweep_resumes_on_another_executor_without_recomputing(seed_runs, tmp_path, first, then):
    study = study_file(tmp_path / "study.yaml", seed_runs, methods=["none"])
    out = tmp_path / "sw"
    cmd = [sys.executable, "-m", "glmc.cli", "sweep", "--file", str(study), "-o", str(out), "--executor", first]
    # Ray's driver is stopped as a user would stop it (Ctrl-C: it shuts its cluster down); submitit's, with SIGKILL
    finished = _kill_when_cells_exist(in_loopback_namespace(cmd) if first == "ray" else cmd, out,
                                      signal.SIGINT if first == "ray" else signal.SIGKILL)
    assert 2 <= len(finished) < 6 and not (out / "sweep.csv").exists()
    again = [sys.executable, "-m", "glmc.cli", "sweep", "--file", str(study), "-o", str(out), "--executor", then]
    proc = subprocess.run(in_loopback_namespace(again), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(finished)} already finished (kept)" in proc.stdout
    for name, stamp in finished.items():
        p = out / "cells" / name
        assert (p.stat().st_ino, p.stat().st_mtime_ns) == stamp  # not recomputed
    assert len(barriers(out)) == 6


@pytest.mark.slow
def test_a_crashing_cell_is_reported_and_the_others_finish(seed_runs, tmp_path):
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "s2"
    shutil.copytree(seed_runs[2], broken)
    weights = broken / "checkpoints" / "step2" / "model.safetensors"
    tensors = load_file(weights)
    first = sorted(tensors)[0]
    tensors[first] = torch.full_like(tensors[first], float("nan"))  # same shapes: only loading it finds out
    save_file(tensors, weights, metadata={"format": "pt"})
    study = study_file(tmp_path / "study.yaml", [seed_runs[0], seed_runs[1], broken], methods=["none"])
    proc = glmc("sweep", "--file", study, "-o", tmp_path / "sw", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert "1 cell(s) failed" in proc.stderr
    rows = list(csv.DictReader((tmp_path / "sw" / "sweep.csv").open()))
    failed = [r for r in rows if r["status"] != "ok"]
    assert len(rows) == 6 and len(failed) == 1 and failed[0]["step"] == "step2" and "s2" in failed[0]["pair"]
    assert "non-finite" in failed[0]["error"] or "NaN" in failed[0]["error"], failed[0]["error"]
    status = glmc("sweep", "--status", tmp_path / "sw").stdout
    assert "5 done, 0 running, 0 pending, 0 submitted, 1 failed, 0 missing" in status


def test_slurm_sweep_writes_the_requested_sbatch_script_and_returns(tmp_path, monkeypatch):
    """No Slurm cluster runs here: `srun` and `sbatch` stand-ins on PATH take the submission, and the test reads
    back the script submitit wrote; sacct is missing, so the jobs' state is unknown and they are left alone."""
    models = []
    for seed in (0, 1, 2):
        from factories import tiny_gpt2

        models.append(tmp_path / f"m{seed}")
        tiny_gpt2(seed=seed).save_pretrained(models[-1])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\ncp \"$1\" {tmp_path}/submitted.sh\necho Submitted batch job 4242\n")
    for f in ("srun", "sbatch"):
        (bin_dir / f).chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    args = ["sweep", *models, "--align", "none,weight", "--data", "shakespeare", "-o", tmp_path / "sw",
            "--executor", "slurm", "--slurm-partition", "gpu", "--slurm-time", 90, "--slurm-gpus-per-cell", 1,
            "--slurm-max-parallel", 3, "--slurm-option", "account=lab", "--cell-cpus", 4, "--cell-memory", 16]
    out = glmc(*args, env=env).stdout
    assert "6 to run on slurm" in out and "submitted 6 cell(s)" in out
    script = (tmp_path / "submitted.sh").read_text()
    for line in ("#SBATCH --partition=gpu", "#SBATCH --time=90", "#SBATCH --gpus-per-node=1",
                 "#SBATCH --array=0-5%3", "#SBATCH --account=lab", "#SBATCH --cpus-per-task=4", "#SBATCH --mem=16GB"):
        assert line in script, (line, script)
    jobs = json.loads((tmp_path / "sw" / "slurm" / "jobs.json").read_text())
    assert sorted(jobs.values()) == [f"4242_{i}" for i in range(6)]
    status = glmc("sweep", "--status", tmp_path / "sw", env=env).stdout
    assert "0 done, 0 running, 0 pending, 6 submitted, 0 failed, 0 missing" in status
    again = glmc(*args, env=env).stdout  # the jobs may still run: nothing is submitted twice
    assert "6 submitted and not ended (left alone); 0 to run" in again


@pytest.mark.slow
def test_polypythias_sweep_file_runs_on_local_stand_ins(tmp_path):
    """The docs' PolyPythias-shaped sweep file (seeds × revisions × methods), its hub ids and revisions stood in
    for by tiny GPT-NeoX runs saved into a temporary Hugging Face cache."""
    text = Path(__file__).parents[2].joinpath("docs", "guide", "sweeps.md").read_text()
    doc = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    import yaml

    spec = yaml.safe_load(doc)
    assert len(spec["models"]) >= 3 and len(spec["revisions"]) >= 3 and len(spec["methods"]) >= 3
    steps = dict(zip(spec["revisions"][:2], ("step0", "step2")))  # the first two revisions, stood in for
    cache = tmp_path / "hub"
    for i, repo in enumerate(spec["models"][:3]):
        run = tmp_path / f"run{i}"
        run_cli("train", "neox", "--data", "shakespeare", "--seed", i, "--out", run, "--layers", 2, "--width", 32,
                "--heads", 4, "--mlp", 64, "--context", 32, "--steps", 2, "--batch-size", 8, "--eval-every", 2,
                "--save-every", 2, "--quiet")
        make_cache(cache, repo, {r: run / "checkpoints" / s for r, s in steps.items()})
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({**spec, "models": spec["models"][:3], "revisions": list(steps),
                                     "methods": ["none", "weight"], "executor": "local",
                                     "options": {**spec.get("options", {}), **FAST}}))
    proc = glmc("sweep", "--file", study, "-o", tmp_path / "sw", env={"HF_HUB_CACHE": str(cache)})
    rows = list(csv.DictReader((tmp_path / "sw" / "sweep.csv").open()))
    assert len(rows) == 3 * 2 * 2 and all(r["status"] == "ok" for r in rows), proc.stdout
    labels = [m.split("/")[-1] for m in spec["models"][:3]]
    assert {r["pair"] for r in rows} == {f"{labels[0]}~{labels[1]}", f"{labels[0]}~{labels[2]}",
                                         f"{labels[1]}~{labels[2]}"}
    assert f"{labels[0]}~{labels[1]}" in proc.stdout  # whole names in the printed table
    assert (tmp_path / "sw" / "sweep-steps.png").stat().st_size > 10_000


def test_sweep_file_errors_name_the_key(tmp_path):
    bad = {"metods: [none]": "unknown key metods", "methods: none": "methods must be a list",
           "methods: [nope]\nmodels: [a, b]": "unknown method 'nope'", "executor: {kind: pbs}": "executor.kind",
           "executor: {slurm: {time: two hours}}": "executor.slurm.time must be a int",
           "options: {pointz: 3}": "unknown option 'pointz'", "models: [a, b]\n  - c": "not valid YAML",
           "[1, 2]": "a sweep file is a mapping", "checkpoints: [only-one]": "at least two runs"}
    for text, message in bad.items():
        f = tmp_path / "study.yaml"
        f.write_text(text)
        proc = glmc("sweep", "--file", f, "-o", tmp_path / "sw", check=False)
        assert proc.returncode == 1, (text, proc.stdout, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr, (text, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    f.write_text("models: [a, b]")
    proc = glmc("sweep", "--file", f, "a", "-o", tmp_path / "sw", check=False)
    assert proc.returncode == 2 and "--file gives the grid and methods; drop MODELS" in proc.stderr


def test_an_incompatible_model_is_refused_before_any_cell_runs(tmp_path):
    from factories import neox, tiny_gpt2

    paths = [tmp_path / "g0", tmp_path / "g1", tmp_path / "nx"]
    tiny_gpt2(seed=0).save_pretrained(paths[0])
    tiny_gpt2(seed=1).save_pretrained(paths[1])
    neox(seed=0).save_pretrained(paths[2])
    proc = glmc("sweep", *paths, "--align", "none", "--data", "shakespeare", "-o", tmp_path / "sw", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert str(paths[2]) in proc.stderr and "cannot combine a gpt2 model" in proc.stderr, proc.stderr
    assert not list((tmp_path / "sw").glob("cells/*"))  # no cell started


def test_the_api_runs_a_sweep_and_returns_its_rows(seed_runs, tmp_path):
    import glmc as api

    result = api.sweep(checkpoints=seed_runs[:2], methods=["none"], out=tmp_path / "sw", options=FAST,
                       progress=False, log=lambda *_: None)
    assert result.done and result.failed == 0 and len(result.rows) == 3
    assert [r["step"] for r in result.rows] == ["step0", "step2", "step4"]
    assert "3 done" in repr(result) and "s0~s1" in result.table()
    again = api.sweep(checkpoints=seed_runs[:2], methods=["none"], out=tmp_path / "sw", options=FAST,
                      progress=False, log=lambda *_: None)
    assert [r["loss_barrier"] for r in again.rows] == [r["loss_barrier"] for r in result.rows]
    with pytest.raises(api.errors.BadOption, match="unknown executor 'pbs'"):
        api.sweep(checkpoints=seed_runs[:2], out=tmp_path / "x", executor="pbs")
