"""Scale benchmark for GPT-NeoX: weight matching of two random-weight float32 checkpoints shaped like Pythia-160M
and Pythia-410M, with wall time and peak memory (issue 38's targets on 2 cores: 160M within 60 s and 2.5 GB, 410M
within 3 minutes and 5 GB; the two 410M inputs alone are 3.2 GB).

Builds each pair once (seeds 0, 1; cached under --cache), runs `glmc align A B --method weight` in a child process
and reports the child's wall time, peak resident memory, iterations, weight distance and the function check, as
benchmarks/scale.py does for GPT-2 and Llama.

    python benchmarks/scale_neox.py --size 160m
    python benchmarks/scale_neox.py               # both sizes, 160M first
Run it alone: two torch processes on 2 cores slow each other 7–12×.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import measured_align, parameter_count, write_report  # noqa: E402

# (layers, width, heads, MLP, vocabulary) of the released Pythia configs; rotary_pct 0.25, parallel residual, untied
PYTHIA = {"160m": (12, 768, 12, 3072, 50304), "410m": (24, 1024, 16, 4096, 50304)}


def build_pair(cache: Path, size: str) -> list[Path]:
    """Two random-weight Pythia-shaped checkpoints (seeds 0, 1), built once and cached (float32)."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    layers, width, heads, mlp, vocab = PYTHIA[size]
    paths = []
    for seed in (0, 1):
        out = cache / f"pythia-{size}-shape-seed{seed}"
        if not (out / "config.json").is_file():
            torch.manual_seed(seed)
            cfg = GPTNeoXConfig(num_hidden_layers=layers, hidden_size=width, num_attention_heads=heads,
                                intermediate_size=mlp, vocab_size=vocab, max_position_embeddings=2048,
                                rotary_pct=0.25, rotary_emb_base=10000, use_parallel_residual=True,
                                tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
            GPTNeoXForCausalLM(cfg).save_pretrained(str(out))
        paths.append(out)
    return paths


def measure(size: str, cache: Path, device: str) -> dict:
    a, b = build_pair(cache, size)
    wall, peak, report, its = measured_align(a, b, cache, device)
    params = parameter_count(a)
    return {"model": f"Pythia-{size} shape", "parameters": params, "inputs_gb": 2 * params * 4 / 1e9,
            "device": device, "wall_seconds": wall, "align_seconds": report["seconds"], "peak_rss_gb": peak,
            "iterations": len(its), "distance_before": report["distance_before"],
            "distance_after": report["distance_after"],
            "max_dlogits": max(report["max_dlogits_a"], report["max_dlogits_b"])}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=["160m", "410m", "both"], default="both")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--cache", type=Path, default=Path("runs/scale"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/scale"))
    args = ap.parse_args(argv)
    header = ["model", "params", "inputs GB", "device", "iterations", "align s", "command wall s", "peak RSS GB",
              "distance", "max \\|Δlogits\\|"]
    for size in ["160m", "410m"] if args.size == "both" else [args.size]:
        row = measure(size, args.cache, args.device)
        cells = [row["model"], f"{row['parameters'] / 1e6:.0f} M", f"{row['inputs_gb']:.2f}", args.device,
                 str(row["iterations"]), f"{row['align_seconds']:.1f}", f"{row['wall_seconds']:.1f}",
                 f"{row['peak_rss_gb']:.2f}", f"{row['distance_before']:.4f} → {row['distance_after']:.4f}",
                 f"{row['max_dlogits']:.1e}"]
        write_report(args.out, f"scale-neox-{size}", row, header, cells)


if __name__ == "__main__":
    main()
