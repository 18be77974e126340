"""Do two independently trained models have corresponding MLP units? (validation split)

Permutation-based alignment can only help as far as B has a unit that computes what A's unit computes. This
measures that directly, independent of any residual map: each layer's hidden activations (the input of the
down / output projection) of both models on the same validation batches, and their Pearson correlations
|corr| (absolute: a SwiGLU unit's up/down sign is a symmetry). Per layer, medians over A's units of:

  best       each A unit's best B unit (an upper bound for any one-to-one matching)
  optimal    the one-to-one assignment that maximises the summed |corr| (activation matching's rule, which
             scores signed correlations on training batches)
  weight     the units weight matching pairs (glmc's default)

and, for context, the validation barrier of weight and activation matching as a % of vanilla, and where weight
matching's remaining barrier lives: its path decomposed by role (`glmc.Curve.decompose`, docs/workflows.md; the
same table as `glmc barrier A B --align weight --decompose`).

    glmc train llama --seed 10 --out runs/tune/llama-shakespeare-seed10      # and --seed 11 ... seed11
    glmc train gpt2 --seed 10 --out runs/tune/gpt2-shakespeare-seed10        # and --seed 11 ... seed11
    python benchmarks/unit_correspondence.py \
        --pairs runs/tune/llama-shakespeare-seed10:runs/tune/llama-shakespeare-seed11 \
        --pairs runs/tune/gpt2-shakespeare-seed10:runs/tune/gpt2-shakespeare-seed11

Pairs are model directories (`glmc train … --out DIR`); train missing ones first. Run it alone: two torch
processes on 2 cores slow each other 7–12×.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def model_pair(text: str) -> tuple[Path, Path]:
    """DIR_A:DIR_B, both existing model directories (a one-line usage error otherwise)."""
    dirs = tuple(Path(p) for p in text.split(":"))
    if len(dirs) != 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not DIR_A:DIR_B")
    for d in dirs:
        if not (d / "glmc.json").is_file():
            raise argparse.ArgumentTypeError(f"{d} is not a glmc-trained model directory (glmc train … --out {d})")
    return dirs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", action="append", required=True, type=model_pair, help="DIR_A:DIR_B (repeatable)")
    ap.add_argument("--batches", type=int, default=16, help="validation batches of 32")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/unit_correspondence"))
    args = ap.parse_args(argv)

    import torch

    import glmc
    import glmc.data
    from glmc.matching import align
    from glmc.matching.activation import correlations
    from glmc.matching.assignments import assignment
    from glmc.matching.common import canonical_pair
    from glmc.models import load_model
    from glmc.symmetry.spec import group_name

    rows, md = [], ["| pair | layer | units | best | optimal | weight matching |", "|---|---|---|---|---|---|"]
    summary = ["| pair | vanilla | activation % | weight % |", "|---|---|---|---|"]
    parts: list[str] = []
    for pa, pb in args.pairs:
        a, _ = load_model(pa)
        b, _ = load_model(pb)
        ds = glmc.data.load_for_model(pa)
        val = list(ds.batches("val", 32, max_batches=args.batches, shuffle=False))
        adapter, arch, va, vb = canonical_pair(a, b)
        corr = correlations(adapter, adapter.from_canonical(va, a).eval(), adapter.from_canonical(vb, b).eval(), val)
        torch.manual_seed(0)
        found = {m: align(a, b, m, data=ds, progress=False) for m in ("weight", "activation")}
        vanilla = glmc.barrier(a, b, data=ds, batches=val, progress=False).barrier
        curves = {m: glmc.barrier(al.model_a, al.model_b, data=ds, batches=val, progress=False)
                  for m, al in found.items()}
        pct = {m: 100 * c.barrier / vanilla for m, c in curves.items()}
        name = pa.name.rsplit("-seed", 1)[0]
        decomposition = curves["weight"].decompose(points=5, by=("roles",))
        parts.append(f"{name} (weight matching)\n\n{decomposition.table()}\n")
        summary.append(f"| {name} | {vanilla:.3f} | {pct['activation']:.1f} | {pct['weight']:.1f} |")
        for i in range(arch.n_layer):
            c = corr[f"blocks.{i}.mlp.out"].value().abs()
            n = torch.arange(c.shape[0])
            wperm = found["weight"].transform.elements[group_name("mlp", i)]
            row = {"pair": name, "layer": i, "units": c.shape[0], "best": c.max(1).values.median().item(),
                   "optimal": c[n, assignment(c).src].median().item(), "weight": c[n, wperm.src].median().item()}
            rows.append(row | {"vanilla": vanilla, "pct": pct})
            md.append(f"| {name} | {i} | {row['units']} | {row['best']:.3f} | {row['optimal']:.3f} | "
                      f"{row['weight']:.3f} |")
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)

    text = (f"Median |corr| of MLP hidden units ({args.batches} validation batches of 32)\n\n" + "\n".join(md)
            + "\n\nValidation barrier, % of vanilla\n\n" + "\n".join(summary)
            + "\n\nWhere weight matching's barrier lives (validation, by role)\n\n" + "\n".join(parts) + "\n")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "unit_correspondence.md").write_text(text)
    (args.out / "unit_correspondence.json").write_text(json.dumps(rows, indent=1))
    print(text)


if __name__ == "__main__":
    sys.exit(main())
