"""Align two checkpoints and plot the loss along the straight line between them, before and after.

    python examples/align_and_plot.py runs/g0 runs/g1 --out barrier.png

Works for any pair glmc can load (e.g. two `glmc train` runs from different seeds); the data comes from the
glmc.json beside model A, or from --data (e.g. shakespeare, mnist).
"""

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import glmc  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_a")
    parser.add_argument("model_b")
    parser.add_argument("--data", default=None, help="data spec (default: model A's glmc.json)")
    parser.add_argument("--out", default="barrier.png")
    parser.add_argument("--max-batches", type=int, default=8)
    args = parser.parse_args()

    a, b = glmc.load_model(args.model_a), glmc.load_model(args.model_b)
    alignment = glmc.align(a, b, method="weight", progress=False)
    print(alignment)

    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    for align in (None, alignment):
        curve = glmc.barrier(a, b, data=args.data, align=align, max_batches=args.max_batches, progress=False)
        print(f"{curve.method:>8}: barrier {curve.barrier:.4f} (mean-of-endpoints {curve.barrier_mean:.4f})")
        curve.plot(ax)
    fig.savefig(args.out, dpi=120, bbox_inches="tight")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
