"""Scale benchmark: weight matching of full-size checkpoints, with wall time and peak resident memory.

Builds two independently initialised random-weight checkpoints of a real model size (default: GPT-2-124M
shape — 12 layers, width 768, 12 heads, vocabulary 50257, untied head, 0.5 GB each in float32; cached under
--cache), then runs `glmc align A B --method weight` in a child process and reports the child's wall time, its
peak resident memory (wait4's rusage), the alignment time, iterations, weight distance and the exact-function
check from align.json. Random weights are the hard case for the assignments (no structure to find); trained
models converge in as many or fewer iterations. Writes scale.md / scale.json under --out.

    python benchmarks/scale.py                       # GPT-2-124M pair
    python benchmarks/scale.py --layers 24 --width 1024 --heads 16   # GPT-2-medium shape
Run it alone: two torch processes on 2 cores slow each other 7–12×.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def build_pair(cache: Path, layers: int, width: int, heads: int, vocab: int) -> list[Path]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    paths = []
    for seed in (0, 1):
        out = cache / f"gpt2-L{layers}-d{width}-h{heads}-v{vocab}-seed{seed}"
        if not (out / "config.json").is_file():
            torch.manual_seed(seed)
            config = GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=1024,
                                tie_word_embeddings=False)
            GPT2LMHeadModel(config).save_pretrained(str(out))
        paths.append(out)
    return paths


def run_measured(cmd: list[str], capture: bool = False) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS GB, exit status, stdout if `capture`) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE if capture else None, text=True)
    out = proc.stdout.read() if capture else ""
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - t0, usage.ru_maxrss / 1e6, os.waitstatus_to_exitcode(status), out


def shape_parser(doc: str) -> argparse.ArgumentParser:
    """The options every scale benchmark takes: the GPT-2 shape, device, model cache and output directory."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--cache", type=Path, default=Path("runs/scale"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/scale"))
    return ap


def write_report(out: Path, name: str, row: dict, header: list[str], cells: list[str]) -> None:
    """`name`.json (the row) and `name`.md (a one-row table) under `out`, and the table on stdout."""
    print(json.dumps(row), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(row, indent=1) + "\n")
    md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), "| " + " | ".join(cells) + " |"]
    (out / f"{name}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


def main(argv=None) -> None:
    args = shape_parser(__doc__).parse_args(argv)
    a, b = build_pair(args.cache, args.layers, args.width, args.heads, args.vocab)
    aligned = args.cache / f"{b.name}-to-seed0"
    glmc = str(Path(sys.executable).with_name("glmc"))
    cmd = [glmc, "align", str(a), str(b), "--method", "weight", "--out", str(aligned), "--overwrite",
           "--no-progress", "--device", args.device]
    print("+", " ".join(cmd), flush=True)
    wall, peak, code, _ = run_measured(cmd)
    if code:
        raise SystemExit(f"glmc align failed with exit status {code}")
    report = json.loads((aligned / "align.json").read_text())
    its = [r for r in report["iterations"] if isinstance(r["step"], int)]
    from transformers import GPT2Config

    c = GPT2Config.from_pretrained(str(a))
    params = (2 * c.vocab_size * c.n_embd + c.n_positions * c.n_embd
              + c.n_layer * (12 * c.n_embd ** 2 + 13 * c.n_embd) + 2 * c.n_embd)
    row = {"model": f"GPT-2 {c.n_layer}×{c.n_embd}, {c.n_head} heads, vocab {c.vocab_size}, untied",
           "parameters": params, "checkpoint_gb": params * 4 / 1e9, "device": args.device,
           "wall_seconds": wall, "align_seconds": report["seconds"], "peak_rss_gb": peak,
           "iterations": len(its), "seconds_per_iteration": sum(r["inner_seconds"] + r["residual_seconds"]
                                                                for r in its) / len(its),
           "distance_before": report["distance_before"], "distance_after": report["distance_after"],
           "max_dlogits": max(report["max_dlogits_a"], report["max_dlogits_b"])}
    write_report(args.out, "scale", row,
                 ["model", "params", "device", "iterations", "s / iteration", "align s", "command wall s",
                  "peak RSS GB", "distance", "max \\|Δlogits\\|"],
                 [row["model"], f"{params / 1e6:.0f} M", args.device, str(row["iterations"]),
                  f"{row['seconds_per_iteration']:.1f}", f"{row['align_seconds']:.1f}", f"{wall:.1f}", f"{peak:.2f}",
                  f"{row['distance_before']:.4f} → {row['distance_after']:.4f}", f"{row['max_dlogits']:.1e}"])


if __name__ == "__main__":
    main()
