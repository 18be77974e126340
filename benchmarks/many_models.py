"""Many-model and mixed-width benchmark (issue: universe alignment, simplex barriers, narrow → wide).

Per task: three models of the same width (seeds 0, 1, 2) → simplex barrier for none / weight / learned on a
triangular grid, with the ternary figure; a wide model (seed 0) against models of ½ and ¼ its residual width
(seeds 3, 4) → path barrier after exact embedding alone (`none`), weight and learned matching, with the curves.
Models are trained with `glmc train` (CPU presets unless --train-args) and cached under --cache, so running
benchmarks/barriers.py first shares seeds 0 and 1.

    python benchmarks/many_models.py --tasks gpt2-shakespeare,vit-mnist
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from barriers import NARROW_ARGS, TASKS, _fmt  # noqa: E402


def trained(task: str, seed: int, cache: Path, extra: list[str], width: int | None = None) -> Path:
    name = f"{task}-seed{seed}" + (f"-w{width}" if width else "")
    out = cache / name
    if not (out / "glmc.json").is_file():
        cmd = [sys.executable, "-m", "glmc.cli", "train", *TASKS[task], "--seed", str(seed), "--out", str(out),
               "--quiet", *extra]
        if width:
            cmd += ["--width", str(width), *NARROW_ARGS.get(task, [])]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="gpt2-shakespeare,vit-mnist")
    ap.add_argument("--cache", default="runs/bench", type=Path)
    ap.add_argument("--out", default="benchmarks/results", type=Path)
    ap.add_argument("--max-batches", type=int, default=10)
    ap.add_argument("--resolution", type=int, default=6)
    ap.add_argument("--learned-steps", type=int, default=300)
    ap.add_argument("--width", type=int, default=128, help="the wide models' residual width")
    ap.add_argument("--train-args", default="")
    ap.add_argument("--experiments", default="simplex,widths", help="which parts to run: simplex, widths")
    ap.add_argument("--ratios", default="2,4", help="width ratios of the narrow models (seeds 3, 4, …)")
    args = ap.parse_args(argv)

    import glmc.data
    from glmc.experiments.plots import plot_curves, plot_simplex
    from glmc.matching import align, method_options
    from glmc.matching.merge import merge_models
    from glmc.models import load_model
    from glmc.paths.barrier import barrier_metrics, path_curve
    from glmc.paths.simplex import simplex_metrics, simplex_surface

    extra = args.train_args.split()
    rows, results = [], {}
    args.out.mkdir(parents=True, exist_ok=True)
    for task in args.tasks.split(","):
        parts = args.experiments.split(",")
        seeds = (0, 1, 2) if "simplex" in parts else (0,)
        paths = [trained(task, s, args.cache, extra) for s in seeds]
        models = [load_model(p)[0] for p in paths]
        ds = glmc.data.load_for_model(paths[0])
        batches = list(ds.batches("test", 32, max_batches=args.max_batches, shuffle=False))
        surfaces, vanilla = {}, None
        # learned twice: the paper's λ ~ Dirichlet(0.1) and glmc's default Dirichlet(1) (glmc/matching/merge.py)
        runs = (("none", None), ("weight", None), ("learned", 0.1), ("learned", None))
        for method, concentration in runs if "simplex" in parts else ():
            t0 = time.perf_counter()
            aligned, report = models, {}
            if method != "none":
                _, aligned, _, report = merge_models(models, method, data=ds, progress=False,
                                                     steps=args.learned_steps, concentration=concentration)
            seconds = time.perf_counter() - t0
            s = simplex_surface(aligned, batches, ds.task, args.resolution, progress=False)
            m = simplex_metrics(s)
            label = method if method != "learned" else f"learned (Dirichlet({report['learned']['concentration']:g}))"
            if concentration is None:  # the figure shows the defaults
                surfaces[method] = {**s, **m}
            vanilla = m["barrier"] if method == "none" else vanilla
            row = {"task": task, "experiment": "simplex k=3", "method": label, "barrier": m["barrier"],
                   "pct_of_vanilla": 100 * m["barrier"] / vanilla, "align_s": seconds}
            rows.append(row)
            print(json.dumps(row), flush=True)
        if surfaces:
            plot_simplex(surfaces, args.out / f"simplex-{task}.png", title=f"{task}: excess loss over the simplex")
            results[f"{task}/simplex"] = surfaces

        wide = models[0]
        ratios = [int(r) for r in args.ratios.split(",") if r]
        for ratio, seed in zip(ratios, range(3, 3 + len(ratios))) if "widths" in parts else ():
            narrow_path = trained(task, seed, args.cache, extra, width=args.width // ratio)
            narrow = load_model(narrow_path)[0]
            base, curves = None, {}
            # learned matching with and without the embedded model's null-space freedom (glmc/matching/nullspace.py)
            for method, null_space in (("none", None), ("weight", None), ("learned", "off"), ("learned", None)):
                t0 = time.perf_counter()
                al = align(narrow, wide, method, **method_options(method, dict(
                    data=ds, progress=False, steps=args.learned_steps, null_space=null_space)))
                seconds = time.perf_counter() - t0
                curve = path_curve([al.model_a, al.model_b], batches, ds.task, 11, progress=False)
                m = barrier_metrics(curve)
                base = m["loss_barrier"] if method == "none" else base
                w = al.report["widened"]
                label = method if method == "none" else f"{method} (null space {al.report['null_space']})"
                row = {"task": task, "experiment": f"width 1/{ratio} → 1", "method": label,
                       "barrier": m["loss_barrier"], "pct_of_vanilla": 100 * m["loss_barrier"] / base,
                       "align_s": seconds, "embed_dlogits": w["embedding_max_dlogits"],
                       "eps_dlogits": w["eps_effect_max_dlogits"]}
                rows.append(row)
                curves[label] = curve
                print(json.dumps(row), flush=True)
            if curves:
                plot_curves(curves, args.out / f"widths-{task}-1_{ratio}.png",
                            title=f"{task}: width 1/{ratio} (λ = 0) → 1 (λ = 1)")
                results[f"{task}/width 1/{ratio}"] = curves
    cols = ["task", "experiment", "method", "barrier", "pct_of_vanilla", "align_s", "embed_dlogits", "eps_dlogits"]
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
    name = "many_models" + ("" if args.experiments == "simplex,widths" else "-" + args.experiments.replace(",", "-"))
    (args.out / f"{name}.md").write_text("\n".join(md) + "\n")
    (args.out / f"{name}.json").write_text(json.dumps({"rows": rows, "results": results}, default=str))
    print("\n".join(md))


if __name__ == "__main__":
    sys.exit(main())
