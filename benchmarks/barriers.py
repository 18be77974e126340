"""Barrier benchmark: independently trained pairs, every alignment method, one table.

For each task (GPT-2 on Shakespeare, ViT on MNIST and Fashion-MNIST) two models are trained with
`glmc train` (seeds 0 and 1, CPU presets; cached under --cache), aligned with each method and evaluated on
the test split at 11 points. Prints a Markdown table and writes barriers.csv / barriers.md / barriers.json.
Columns: loss barrier (paper's definition), as % of vanilla, Re-Basin's mean-of-endpoints barrier, accuracy
drop, alignment wall time, seconds per learned-matching step and its ratio to one AdamW training step of a
single model, parameter count of the interpolated model (native vs the paper's circuit form), and the peak
resident memory of the benchmark process so far (CPU; monotone across rows).

    python benchmarks/barriers.py --tasks gpt2-shakespeare,vit-mnist --methods none,activation,weight,learned
Run it alone: two torch processes on 2 cores slow each other 7–12×.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

TASKS = {
    "gpt2-shakespeare": ["gpt2", "--data", "shakespeare"],
    "vit-mnist": ["vit", "--data", "mnist"],
    "vit-fashion-mnist": ["vit", "--data", "fashion-mnist"],
    "timm-vit-mnist": ["vit", "--data", "mnist", "--family", "timm"],
    # Llama-family decoders (the `glmc train llama` CPU preset: 4 query / 2 key-value heads, SwiGLU, untied)
    "llama-shakespeare": ["llama", "--data", "shakespeare"],
    "llama-stdlib-bpe": ["llama", "--data", "python-stdlib", "--tokenizer", "bpe:512"],
}
# what a narrower model of a task adds to --width: RoPE ties a head's frequencies to its size, so narrower
# Llamas keep the preset's 4 heads of 32 dimensions (glmc widens their residual and MLP, never their heads)
NARROW_ARGS = {"llama-shakespeare": ["--head-dim", "32"], "llama-stdlib-bpe": ["--head-dim", "32"]}


def train_pair(task: str, cache: Path, extra: list[str]) -> list[Path]:
    paths = []
    for seed in (0, 1):
        out = cache / f"{task}-seed{seed}"
        if not (out / "glmc.json").is_file():
            cmd = [sys.executable, "-m", "glmc.cli", "train", *TASKS[task], "--seed", str(seed), "--out", str(out),
                   "--quiet", *extra]
            print("+", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
        paths.append(out)
    return paths


def train_step_seconds(model, ds, batch_size: int = 32, repeats: int = 5) -> float:
    """Wall time of one AdamW training step of a single model on a training batch (the unit learned matching's
    step is compared with)."""
    import copy

    import torch

    from glmc.models.evaluate import loss_and_correct

    m = copy.deepcopy(model).train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    batches = list(ds.batches("train", batch_size, max_batches=repeats + 1, seed=0, shuffle=True))
    times = []
    for batch in batches:
        t0 = time.perf_counter()
        loss, _, n = loss_and_correct(m, batch)
        (loss / n).backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
    return sorted(times[1:])[len(times[1:]) // 2]  # median, first (warm-up) step dropped


def aligned_barrier(al, mode: str, batches, task: str, points: int = 11):
    """(curve, barrier metrics, the endpoints interpolated) of the straight path between an alignment's two
    endpoints, in circuit form for mode "circuit" (the paper's parametrisation)."""
    from glmc.paths.barrier import barrier_metrics, path_curve

    ends = [al.model_a, al.model_b]
    if mode == "circuit":
        from glmc.view.circuit import circuit_model

        ends = [circuit_model(e) for e in ends]
    curve = path_curve(ends, batches, task, points, progress=False)
    return curve, barrier_metrics(curve), ends


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="gpt2-shakespeare,vit-mnist,vit-fashion-mnist")
    ap.add_argument("--methods", default="none,activation,weight,learned-perm,learned")
    ap.add_argument("--cache", default="runs/bench", type=Path)
    ap.add_argument("--out", default="benchmarks/results", type=Path)
    ap.add_argument("--max-batches", type=int, default=40, help="test batches per λ point")
    ap.add_argument("--learned-steps", type=int, default=300)
    ap.add_argument("--learned-lr", default="", help="comma-separated learning rates: one learned row each, beside "
                    "the default one (e.g. '0.01')")
    ap.add_argument("--train-args", default="", help="extra arguments for glmc train (e.g. '--steps 300')")
    ap.add_argument("--circuit-methods", default="weight,learned",
                    help="methods also run in --mode circuit, for the native-vs-circuit comparison ('' for none)")
    args = ap.parse_args(argv)

    import torch

    import glmc.data
    from glmc.matching import align, method_options
    from glmc.models import load_model

    rows, results = [], {}
    for task in args.tasks.split(","):
        paths = train_pair(task, args.cache, args.train_args.split())
        a, _ = load_model(paths[0])
        b, _ = load_model(paths[1])
        ds = glmc.data.load_for_model(paths[0])
        batches = list(ds.batches("test", 32, max_batches=args.max_batches, shuffle=False))
        vanilla = None
        step_s = train_step_seconds(a, ds)
        runs = [(m, "native", None) for m in args.methods.split(",")]
        runs += [("learned", "native", float(lr)) for lr in args.learned_lr.split(",") if lr]
        runs += [(m, "circuit", None) for m in args.circuit_methods.split(",") if m]
        for method, mode, lr in runs:
            torch.manual_seed(0)
            t0 = time.perf_counter()
            extra = {} if lr is None else {"lr": lr}
            al = align(a, b, method, **method_options(method, dict(data=ds, progress=False, steps=args.learned_steps,
                                                                   mode=mode, **extra)))
            seconds = time.perf_counter() - t0
            curve, m, ends = aligned_barrier(al, mode, batches, ds.task)
            vanilla = m["loss_barrier"] if method == "none" else vanilla
            rep = al.report
            label = method if lr is None else f"{method} (lr {lr:g})"
            row = {"task": task, "method": label, "mode": mode, "loss_A": m["loss_endpoints"][0],
                   "loss_B": m["loss_endpoints"][1], "barrier": m["loss_barrier"],
                   "pct_of_vanilla": 100 * m["loss_barrier"] / vanilla if vanilla else float("nan"),
                   "barrier_mean": m["loss_barrier_mean"], "acc_drop": m["acc_drop"], "align_s": seconds,
                   "s_per_step": rep.get("seconds_per_step"),
                   "step_vs_train": rep["seconds_per_step"] / step_s if rep.get("seconds_per_step") else None,
                   "best_step": rep.get("best_step"), "params": sum(p.numel() for p in ends[0].parameters()),
                   "max_dlogits": rep.get("max_dlogits_b"), "peak_mb": peak_mb()}
            rows.append(row)
            results[f"{task}/{row['method']}/{mode}"] = {"row": row, "curve": curve, "report": rep}
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
    write(rows, results, args.out)


def _fmt(v):
    if v is None:
        return "–"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def write(rows, results, out: Path):
    out.mkdir(parents=True, exist_ok=True)
    cols = list(rows[0])
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(_fmt(r[c]) for c in cols) + " |" for r in rows]
    (out / "barriers.md").write_text("\n".join(md) + "\n")
    (out / "barriers.csv").write_text(
        "\n".join([",".join(cols)] + [",".join(_fmt(r[c]) for c in cols) for r in rows]) + "\n"
    )
    (out / "barriers.json").write_text(json.dumps(results, indent=1, default=str))
    print("\n".join(md))


if __name__ == "__main__":
    sys.exit(main())
