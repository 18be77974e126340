"""Does activation matching give weight or learned matching a better start? (validation split of a tuning pair)

Activation matching now fits the residual group's map (glmc/matching/activation.py); on the Llama code test pair
it came out below weight matching. This tries its maps as starts, on a pair that reports nothing (Llama,
Shakespeare, seeds 10 / 11, trained here if missing):

  activation         activation matching alone
  weight             the default weight matching
  w-actR             weight matching's alternation started from activation's residual map
  w-fixed-actR       activation's permutations kept; residual, per-head and MLP-scale maps by the alternation,
                     started from activation's residual map
  w-fixed-I          the same from the identity residual map
  learned            the default learned matching (from weight matching's unweighted fit)
  learned:w-fixed-actR  learned matching (its defaults) from w-fixed-actR

    python benchmarks/activation_starts.py --out benchmarks/results/llama
Run it alone: two torch processes on 2 cores slow each other 7–12×.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

RUNS = ("activation", "weight", "w-actR", "w-fixed-actR", "w-fixed-I", "learned", "learned:w-fixed-actR")


def trained(cache: Path, seed: int) -> Path:
    out = cache / f"llama-shakespeare-seed{seed}"
    if not (out / "glmc.json").is_file():
        cmd = [sys.executable, "-m", "glmc.cli", "train", "llama", "--data", "shakespeare", "--seed", str(seed),
               "--out", str(out), "--quiet"]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=Path("runs/tune"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/llama"))
    ap.add_argument("--seeds", default="10,11")
    ap.add_argument("--max-batches", type=int, default=16, help="validation batches per λ point")
    args = ap.parse_args(argv)

    import torch

    import glmc
    import glmc.data
    from glmc.matching import align
    from glmc.matching import alternation as wm
    from glmc.matching.common import canonical_pair, finish
    from glmc.matching.learned import DEFAULT_LR, DEFAULT_PERM_LR, DEFAULT_STEPS, LearnedMatcher
    from glmc.matching.residual_fit import residual_kind, solve_residual
    from glmc.models import load_model
    from glmc.models.evaluate import model_device
    from glmc.symmetry.spec import split_name
    from glmc.symmetry.transform import Transform

    paths = [trained(args.cache, int(s)) for s in args.seeds.split(",")]
    a, _ = load_model(paths[0])
    b, _ = load_model(paths[1])
    ds = glmc.data.load_for_model(paths[0])
    val = list(ds.batches("val", 32, max_batches=args.max_batches, shuffle=False))
    vanilla = glmc.barrier(a, b, data=ds, batches=val, progress=False).barrier

    torch.manual_seed(0)
    t0 = time.perf_counter()
    act = align(a, b, "activation", data=ds, progress=False)
    act_seconds = time.perf_counter() - t0
    perms = Transform({n: e for n, e in act.transform.elements.items()
                       if split_name(n)[0] in ("heads", "kv_heads", "query_heads", "mlp")})

    def alternation(first: str, fixed: bool) -> Transform:
        _, arch, va, vb = canonical_pair(a, b)
        eye = torch.eye(va["blocks.0.attn.q.w"].shape[-1], dtype=torch.float64)
        res = act.transform["residual"] if first == "act" else solve_residual(eye, residual_kind(arch))
        t, _ = wm.weight_matching(va, perms.apply(vb, arch) if fixed else vb, arch, progress=False, tol=wm.TOL,
                                  first_maps=[res], permutations=not fixed)
        return perms.then(t, arch) if fixed else t

    def built(t: Transform):
        adapter, arch, va, vb = canonical_pair(a, b)
        return finish(a, b, adapter, arch, va, vb, t, {})

    def learned_from(t: Transform):
        adapter, arch, va, vb = canonical_pair(a, b)
        m = LearnedMatcher([va, vb], adapter, arch, adapter.from_canonical(va, a), ds, [t], None, False,
                           model_device(a), "native", probes=[None])
        fit = m.fit(DEFAULT_STEPS, None, None, DEFAULT_LR, batch_size=32, sampler="narrow", eval_every=50,
                    eval_batches=8, seed=0, progress=False, perm_lr=DEFAULT_PERM_LR)
        return built(fit["transforms"][0])

    found, rows = {}, []
    for run in RUNS:
        torch.manual_seed(0)
        t0 = time.perf_counter()
        if run == "activation":
            al, seconds = act, act_seconds
        elif run in ("weight", "learned"):
            al = align(a, b, run, data=ds, progress=False)
        elif run.startswith("learned:"):
            al = learned_from(found[run.split(":")[1]])
        else:
            found[run] = alternation("act" if run.endswith("actR") else "identity", "fixed" in run)
            al = built(found[run])
        seconds = act_seconds if run == "activation" else time.perf_counter() - t0
        bar = glmc.barrier(al.model_a, al.model_b, data=ds, batches=val, progress=False).barrier
        row = {"run": run, "barrier": bar, "pct_of_vanilla": 100 * bar / vanilla,
               "distance": al.report.get("distance_after"), "seconds": seconds}
        rows.append(row)
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    md = [f"Llama tuning pair (seeds {args.seeds}), validation split, vanilla barrier {vanilla:.4f}", "",
          "| start | barrier | % of vanilla | weight distance | s |", "|---|---|---|---|---|"]
    md += [f"| {r['run']} | {r['barrier']:.4f} | {r['pct_of_vanilla']:.1f} | {r['distance']:.3f} | {r['seconds']:.0f} |"
           for r in rows]
    (args.out / "activation_starts.md").write_text("\n".join(md) + "\n")
    (args.out / "activation_starts.json").write_text(json.dumps({"vanilla": vanilla, "rows": rows}, indent=1))
    print("\n".join(md))


if __name__ == "__main__":
    sys.exit(main())
