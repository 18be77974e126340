"""The same trained GPT-2 pair in every checkpoint format glmc reads (docs/checkpoints.md), through the real CLI:
float32 single files (the reference), bfloat16 and float16 (save_pretrained), sharded safetensors, pytorch_model.bin
(torch.save of the state dict) and a Hugging Face cache with two revisions. For each: `glmc verify` on A, `glmc
barrier --align none,weight`, `glmc align` (function check, the rounding's effect, the written dtype as
from_pretrained loads it) and `glmc merge` (merged test loss, written dtype).

    .venv/bin/python benchmarks/checkpoint_formats.py --out runs/formats

Trains the pair first if ROOT/s0, ROOT/s1 are absent: glmc train gpt2 --layers 2 --width 64 --heads 4 --mlp 256
--context 64 --steps 200 --seed 0|1 (about a minute each on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

TRAIN = ["--layers", "2", "--width", "64", "--heads", "4", "--mlp", "256", "--context", "64", "--steps", "200",
         "--quiet"]
EVAL = ["--max-batches", "8", "--batch-size", "16", "--no-progress"]
KEEP = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "glmc.json")


def glmc(*args) -> str:
    """Run the real CLI in this process; its printed lines."""
    import contextlib
    import io

    from glmc.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main([str(a) for a in args], standalone_mode=False)
    return buf.getvalue()


def resave(src: Path, dst: Path, dtype=None, **save) -> Path:
    from transformers import GPT2LMHeadModel

    if dst.exists():
        return dst
    model = GPT2LMHeadModel.from_pretrained(src)
    (model.to(dtype) if dtype is not None else model).save_pretrained(dst, **save)
    for name in KEEP:
        if (src / name).is_file():
            shutil.copy(src / name, dst / name)
    return dst


def as_bin(src: Path, dst: Path) -> Path:
    import torch
    from transformers import GPT2LMHeadModel

    if dst.exists():
        return dst
    dst.mkdir(parents=True)
    model = GPT2LMHeadModel.from_pretrained(src)
    model.config.save_pretrained(dst)
    torch.save(model.state_dict(), dst / "pytorch_model.bin")
    for name in KEEP:
        if (src / name).is_file():
            shutil.copy(src / name, dst / name)
    return dst


def variants(root: Path, a: Path, b: Path) -> dict:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from conftest import make_cache

    cache = root / "hub"
    if not cache.exists():
        make_cache(cache, "glmc-bench/pair", {"step200": a, "main": b})
    os.environ["HF_HUB_CACHE"] = str(cache)
    out = {"float32": (a, b)}
    for name, dtype in (("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        out[name] = tuple(resave(p, root / f"{name}-{p.name}", dtype) for p in (a, b))
    out["sharded"] = tuple(resave(p, root / f"sharded-{p.name}", max_shard_size="100KB") for p in (a, b))
    out["pytorch_model.bin"] = tuple(as_bin(p, root / f"bin-{p.name}") for p in (a, b))
    out["cache revisions"] = ("glmc-bench/pair@step200", "glmc-bench/pair@main")
    return out


def measure(name: str, a, b, work: Path) -> dict:
    from transformers import GPT2LMHeadModel

    assert "all " in glmc("verify", a)
    glmc("barrier", a, b, "--align", "none,weight", "--json", work / "barrier.json", *EVAL)
    barriers = json.loads((work / "barrier.json").read_text())["results"]
    glmc("align", a, b, "--out", work / "aligned", "--overwrite", "--no-progress")
    report = json.loads((work / "aligned" / "align.json").read_text())
    aligned = GPT2LMHeadModel.from_pretrained(work / "aligned")
    glmc("merge", a, b, "--out", work / "merged", "--overwrite", *EVAL)
    merge = json.loads((work / "merged" / "merge.json").read_text())
    merged = GPT2LMHeadModel.from_pretrained(work / "merged")
    return {"format": name, "none": barriers["none"]["loss_barrier"], "weight": barriers["weight"]["loss_barrier"],
            "check": report["max_dlogits_b"], "rounding": report.get("rounding", {}).get("max_dlogits", 0.0),
            "aligned_dtype": str(next(aligned.parameters()).dtype).removeprefix("torch."),
            "merged_loss": merge["scores"]["merged"]["loss"],
            "merged_dtype": str(next(merged.parameters()).dtype).removeprefix("torch.")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/formats", type=Path)
    args = parser.parse_args()
    root = args.out.resolve()
    for seed in (0, 1):
        if not (root / f"s{seed}").is_dir():
            glmc("train", "gpt2", "--seed", seed, "--out", root / f"s{seed}", *TRAIN)
    rows = []
    for name, (a, b) in variants(root, root / "s0", root / "s1").items():
        work = root / "work" / name.replace(" ", "-")
        work.mkdir(parents=True, exist_ok=True)
        rows.append(measure(name, a, b, work))
    ref = rows[0]
    print("| format | barrier none | barrier weight | Δ vs float32 (none, weight) | function check | rounding "
          "max |Δlogits| | aligned written as | merged test loss | merged written as |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['format']} | {r['none']:.4f} | {r['weight']:.4f} | {r['none'] - ref['none']:+.1e}, "
              f"{r['weight'] - ref['weight']:+.1e} | {r['check']:.1e} | {r['rounding']:.1e} | {r['aligned_dtype']} | "
              f"{r['merged_loss']:.4f} | {r['merged_dtype']} |")
    (root / "formats.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
