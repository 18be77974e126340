"""The same study on every executor (issue #46): three `glmc train --save-every` runs (seeds 0-2, three checkpoints
each), every pair at every step, three methods — 27 cells — under the local executor, a local Ray cluster and
submitit's LocalExecutor; prints each table's wall time and the largest barrier difference from the local one.

    python benchmarks/executors.py [--out runs/executors] [--methods none,activation,weight]

Run it alone on the machine (two torch processes on 2 cores slow each other down). The Ray cluster runs in a
network namespace with only the loopback interface where this user can make one (root).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

RUN = ["--layers", "2", "--width", "64", "--heads", "4", "--mlp", "128", "--context", "64", "--steps", "60",
       "--eval-every", "30", "--batch-size", "16", "--save-every", "30", "--quiet"]
EXECUTORS = ("local", "ray", "submitit-local")


def glmc(*args) -> list[str]:
    return [sys.executable, "-m", "glmc.cli", *map(str, args)]


def loopback(cmd: list[str]) -> list[str]:
    if shutil.which("unshare") and os.geteuid() == 0:
        return ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *cmd]
    return cmd


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("runs/executors"))
    ap.add_argument("--methods", default="none,activation,weight")
    ap.add_argument("--max-batches", type=int, default=4)
    args = ap.parse_args(argv)
    runs = [args.out / f"s{seed}" for seed in range(3)]
    for seed, run in enumerate(runs):
        if not (run / "glmc.json").is_file():
            subprocess.run(glmc("train", "gpt2", "--data", "shakespeare", "--seed", seed, "--out", run, *RUN),
                           check=True)
    study = args.out / "study.yaml"
    study.write_text(json.dumps({"name": "executors", "checkpoints": [str(r) for r in runs],
                                 "methods": args.methods.split(","),
                                 "options": {"points": 5, "max_batches": args.max_batches, "batch_size": 16}}))
    tables, report = {}, {}
    for name in EXECUTORS:
        out = args.out / f"sweep-{name}"
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        cmd = glmc("sweep", "--file", study, "-o", out, "--executor", name, "--jobs", 2, "--cell-cpus", 1)
        proc = subprocess.run(loopback(cmd) if name == "ray" else cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        rows = list(csv.DictReader((out / "sweep.csv").open()))
        tables[name] = {(r["pair"], r["step"], r["method"]): float(r["loss_barrier"]) for r in rows}
        report[name] = {"cells": len(rows), "ok": sum(r["status"] == "ok" for r in rows),
                        "wall_seconds": round(time.perf_counter() - t0, 1)}
        if name == "local":
            print(proc.stdout.split("wrote ")[-1].split("\n", 1)[1], flush=True)  # the printed table
    base = tables["local"]
    for name in EXECUTORS:
        diff = max(abs(tables[name][k] - base[k]) for k in base) if tables[name].keys() == base.keys() else None
        report[name]["max_abs_diff_vs_local"] = diff
        print(json.dumps({"executor": name, **report[name]}), flush=True)
    commit = json.loads((args.out / "sweep-local" / "sweep.json").read_text())["provenance"]["code"]
    (args.out / "executors.json").write_text(json.dumps({"report": report, "code": commit}, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
