"""Merge three models into one by aligning them to a shared universe; compare the loss over their simplex
before and after alignment.

    python examples/merge_three.py runs/g0 runs/g1 runs/g2 --out runs/merged
"""

import argparse

import glmc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs=3)
    parser.add_argument("--data", default=None, help="data spec (default: model 1's glmc.json)")
    parser.add_argument("--out", default="runs/merged")
    parser.add_argument("--max-batches", type=int, default=8)
    args = parser.parse_args()

    models = [glmc.load_model(p) for p in args.models]
    merged = glmc.merge(models, method="weight", progress=False)
    for i, m in enumerate(models):
        print(f"model {i + 1}: test loss {glmc.evaluate(m, args.data, max_batches=args.max_batches)['loss']:.4f}")
    score = glmc.evaluate(merged.model, args.data, max_batches=args.max_batches)
    print(f"merged (universe weight matching): test loss {score['loss']:.4f}")
    print(f"max |Δlogits| of the aligned models: {max(merged.report['max_dlogits']):.1e}")

    raw = glmc.barrier(models, data=args.data, max_batches=args.max_batches, resolution=4, progress=False)
    aligned = glmc.barrier(merged.aligned, data=args.data, max_batches=args.max_batches,
                           resolution=4, progress=False)
    print(f"simplex barrier: raw {raw.barrier:.4f}, aligned {aligned.barrier:.4f}")
    merged.save(args.out, overwrite=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
