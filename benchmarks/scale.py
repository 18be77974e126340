"""Scale benchmark: weight matching (and merging) of full-size checkpoints, with wall time and peak memory.

Builds two independently initialised random-weight checkpoints of a real model size (default: GPT-2-124M
shape — 12 layers, width 768, 12 heads, vocabulary 50257, untied head, 0.5 GB each in float32; cached under
--cache), then runs `glmc align A B --method weight` in a child process and reports the child's wall time, its
peak resident memory (wait4's rusage), the alignment time, iterations, weight distance and the exact-function
check from align.json. With --merge it also runs `glmc merge A B --method weight` in a child process. Random
weights are the hard case for the assignments (no structure to find); trained models converge in as many or
fewer iterations. Writes scale[-NAME].md / .json under --out.

    python benchmarks/scale.py                       # GPT-2-124M pair
    python benchmarks/scale.py --layers 24 --width 1024 --heads 16   # GPT-2-medium shape
    python benchmarks/scale.py --family llama --preset 1b --merge     # TinyLlama-1.1B shape: align and merge
Run it alone: two torch processes on 2 cores slow each other 7–12×.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

# Llama shapes (layers, width, heads, key/value heads, MLP, vocabulary): TinyLlama-1.1B's, and a small one
LLAMA_PRESETS = {"1b": (22, 2048, 32, 4, 5632, 32000), "160m": (12, 768, 12, 4, 2048, 32000)}


def build_pair(cache: Path, layers: int, width: int, heads: int, vocab: int, family: str = "gpt2",
               kv_heads: int | None = None, mlp: int | None = None) -> list[Path]:
    """Two random-weight checkpoints (seeds 0, 1) of the given shape, built once and cached (float32)."""
    import torch

    paths = []
    for seed in (0, 1):
        name = f"{family}-L{layers}-d{width}-h{heads}" + (f"-kv{kv_heads}-m{mlp}" if family == "llama" else "")
        out = cache / f"{name}-v{vocab}-seed{seed}"
        if not (out / "config.json").is_file():
            torch.manual_seed(seed)
            _random_model(family, layers, width, heads, vocab, kv_heads, mlp).save_pretrained(str(out))
        paths.append(out)
    return paths


def _random_model(family, layers, width, heads, vocab, kv_heads, mlp):
    if family == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        return LlamaForCausalLM(LlamaConfig(num_hidden_layers=layers, hidden_size=width, num_attention_heads=heads,
                                            num_key_value_heads=kv_heads, intermediate_size=mlp, vocab_size=vocab,
                                            tie_word_embeddings=False))
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=1024,
                                      tie_word_embeddings=False))


def parameter_count(path: Path) -> int:
    from safetensors import safe_open

    total = 0
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            for k in st.keys():
                total += math.prod(st.get_slice(k).get_shape())
    return total


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
    ap.add_argument("--family", choices=["gpt2", "llama"], default="gpt2")
    ap.add_argument("--preset", choices=sorted(LLAMA_PRESETS), help="Llama shape (sets layers … vocab).")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4, help="Llama key/value heads.")
    ap.add_argument("--mlp", type=int, default=2048, help="Llama MLP width.")
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--cache", type=Path, default=Path("runs/scale"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/scale"))
    return ap


def write_report(out: Path, name: str, row: dict, header: list[str], cells: list[str]) -> None:
    """`name`.json (the row) and `name`.md (a one-row table) under `out`, and the table on stdout."""
    from glmc.provenance import provenance

    # which code, versions and machine made the figures (the row's own keys stay as they were)
    row.setdefault("provenance", provenance(options={"argv": sys.argv[1:]}, device=row.get("device")))
    print(json.dumps(row), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(row, indent=1) + "\n")
    md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), "| " + " | ".join(cells) + " |"]
    (out / f"{name}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


def shape_of(args) -> dict:
    """build_pair's shape arguments from the options (a --preset overrides the Llama sizes)."""
    if args.preset:
        args.family = "llama"
        args.layers, args.width, args.heads, args.kv_heads, args.mlp, args.vocab = LLAMA_PRESETS[args.preset]
    shape = dict(layers=args.layers, width=args.width, heads=args.heads, vocab=args.vocab, family=args.family)
    if args.family == "llama":
        shape.update(kv_heads=args.kv_heads, mlp=args.mlp)
    return shape


def describe(args) -> str:
    if args.family == "llama":
        return (f"Llama {args.layers}×{args.width}, {args.heads} q / {args.kv_heads} kv heads, MLP {args.mlp}, "
                f"vocab {args.vocab}, untied")
    return f"GPT-2 {args.layers}×{args.width}, {args.heads} heads, vocab {args.vocab}, untied"


def measured_align(a: Path, b: Path, cache: Path, device: str) -> tuple[float, float, dict, list]:
    """`glmc align A B --method weight` in a child process: (wall seconds, peak RSS GB, its align.json, the
    report's numbered iterations)."""
    aligned = cache / f"{b.name}-to-seed0"
    glmc = str(Path(sys.executable).with_name("glmc"))
    cmd = [glmc, "align", str(a), str(b), "--method", "weight", "--out", str(aligned), "--overwrite",
           "--no-progress", "--device", device]
    print("+", " ".join(cmd), flush=True)
    wall, peak, code, _ = run_measured(cmd)
    if code:
        raise SystemExit(f"glmc align failed with exit status {code}")
    report = json.loads((aligned / "align.json").read_text())
    return wall, peak, report, [r for r in report["iterations"] if isinstance(r["step"], int)]


def main(argv=None) -> None:
    ap = shape_parser(__doc__)
    ap.add_argument("--merge", action="store_true", help="Also merge the pair (glmc merge --method weight).")
    ap.add_argument("--name", default="scale", help="Report name under --out.")
    args = ap.parse_args(argv)
    a, b = build_pair(args.cache, **shape_of(args))
    params = parameter_count(a)
    wall, peak, report, its = measured_align(a, b, args.cache, args.device)
    row = {"model": describe(args), "parameters": params, "checkpoint_gb": params * 4 / 1e9, "device": args.device,
           "wall_seconds": wall, "align_seconds": report["seconds"], "peak_rss_gb": peak,
           "iterations": len(its), "seconds_per_iteration": sum(r["inner_seconds"] + r["residual_seconds"]
                                                                for r in its) / len(its),
           "distance_before": report["distance_before"], "distance_after": report["distance_after"],
           "max_dlogits": max(report["max_dlogits_a"], report["max_dlogits_b"])}
    header = ["model", "params", "device", "iterations", "s / iteration", "align s", "command wall s", "peak RSS GB",
              "distance", "max \\|Δlogits\\|"]
    cells = [row["model"], f"{params / 1e6:.0f} M", args.device, str(row["iterations"]),
             f"{row['seconds_per_iteration']:.1f}", f"{row['align_seconds']:.1f}", f"{wall:.1f}", f"{peak:.2f}",
             f"{row['distance_before']:.4f} → {row['distance_after']:.4f}", f"{row['max_dlogits']:.1e}"]
    write_report(args.out, args.name, row, header, cells)  # the alignment's figures, whatever the merge does
    if args.merge:
        # a two-model merge: B aligned to A (one universe round) and averaged, at the align command's budget
        merged = args.cache / f"{a.name}-merged"
        glmc = str(Path(sys.executable).with_name("glmc"))
        cmd = [glmc, "merge", str(a), str(b), "--method", "weight", "--out", str(merged), "--overwrite",
               "--no-progress", "--device", args.device, "--no-eval", "--rounds", "1",
               "--iterations", str(len(its))]
        print("+", " ".join(cmd), flush=True)
        m_wall, m_peak, code, _ = run_measured(cmd)
        if code:
            raise SystemExit(f"glmc merge failed with exit status {code}")
        row.update(merge_wall_seconds=m_wall, merge_peak_rss_gb=m_peak)
        header += ["merge wall s", "merge peak RSS GB"]
        cells += [f"{m_wall:.1f}", f"{m_peak:.2f}"]
        write_report(args.out, args.name, row, header, cells)


if __name__ == "__main__":
    main()
