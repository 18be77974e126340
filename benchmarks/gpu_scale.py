"""Real sizes on one device: weight matching at GPT-2-124M, Pythia-410M and TinyLlama-1.1B shapes, a learned-matching
step at 124M and 410M, and a barrier curve at 410M, each in its own child process with its wall time, peak resident
memory, peak device memory and (for every transform) max |Δlogits| (issue #47). benchmarks/gpu_scale.sh runs it.

    python benchmarks/gpu_scale.py --device cuda --out benchmarks/results/gpu
    python benchmarks/gpu_scale.py --device cpu --quick --out /tmp/gpu_scale     # the same steps, tiny shapes

Random-weight pairs as benchmarks/scale.py builds them (cached under --cache). Writes gpu_scale.json (the rows and
the provenance of the run) and gpu_scale.md under --out. A failing step is reported and the others still run; the
exit status is the number of failed steps.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learned_step import _sync, timed_steps  # noqa: E402
from scale import LLAMA_PRESETS, build_pair, run_measured  # noqa: E402
from scale_neox import build_pair as build_neox_pair  # noqa: E402

# name -> (family, shape) of the pairs; the quick form keeps every family and step at a size 2 cores run in seconds
SHAPES = {
    "gpt2-124m": ("gpt2", dict(layers=12, width=768, heads=12, vocab=50257)),
    "pythia-410m": ("neox", "410m"),
    "tinyllama-1.1b": ("llama", dict(zip(("layers", "width", "heads", "kv_heads", "mlp", "vocab"),
                                         LLAMA_PRESETS["1b"]))),
}
QUICK = {
    "gpt2-124m": ("gpt2", dict(layers=2, width=64, heads=4, vocab=500)),
    "pythia-410m": ("neox", "quick"),
    "tinyllama-1.1b": ("llama", dict(layers=2, width=64, heads=8, kv_heads=2, mlp=176, vocab=500)),
}
STEPS = [("align", "gpt2-124m"), ("align", "pythia-410m"), ("align", "tinyllama-1.1b"),
         ("learned-step", "gpt2-124m"), ("learned-step", "pythia-410m"), ("barrier", "pythia-410m")]


def pair(cache: Path, name: str, quick: bool) -> list[Path]:
    family, shape = (QUICK if quick else SHAPES)[name]
    if family == "neox":
        if shape == "quick":
            return _quick_neox(cache)
        return build_neox_pair(cache, shape)
    return build_pair(cache, family=family, **shape)


def _quick_neox(cache: Path) -> list[Path]:
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    out = []
    for seed in (0, 1):
        path = cache / f"pythia-quick-seed{seed}"
        if not (path / "config.json").is_file():
            torch.manual_seed(seed)
            GPTNeoXForCausalLM(GPTNeoXConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                             intermediate_size=256, vocab_size=500, max_position_embeddings=256,
                                             rotary_pct=0.25, use_parallel_residual=True,
                                             tie_word_embeddings=False)).save_pretrained(str(path))
        out.append(path)
    return out


def _tokens(vocab: int, batch: int, context: int, seed: int = 0) -> dict:
    import torch

    ids = torch.randint(0, vocab, (batch, context + 1), generator=torch.Generator().manual_seed(seed))
    return {"input_ids": ids[:, :-1], "targets": ids[:, 1:]}


def _device_peak(device: str) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated(device) / 1e9 if device.startswith("cuda") else None


def step_align(a: Path, b: Path, device: str, **_) -> dict:
    import glmc

    t0 = time.perf_counter()
    al = glmc.align(glmc.load_model(a, device=device), glmc.load_model(b, device=device), method="weight",
                    progress=False)
    _sync(device)
    return {"seconds": time.perf_counter() - t0, "iterations": sum(isinstance(r["step"], int)
                                                                   for r in al.report["iterations"]),
            "max_dlogits": max(al.report["max_dlogits_a"], al.report["max_dlogits_b"])}


def step_learned(a: Path, b: Path, device: str, batch: int, context: int, steps: int, **_) -> dict:
    """Learned-matching steps from one weight-matching iteration (as benchmarks/learned_step.py), timed after a
    warm-up; the transform found is checked on the function."""
    from types import SimpleNamespace

    import torch

    import glmc
    from glmc.matching.alternation import weight_matching
    from glmc.matching.common import canonical_cpu_view, canonical_pair, max_logit_change
    from glmc.matching.learned import LearnedMatcher

    ma, mb = glmc.load_model(a, device=device), glmc.load_model(b, device=device)
    adapter, arch, view_a, view_b = canonical_pair(ma, mb)
    init, _ = weight_matching(view_a, view_b, arch, iterations=1, progress=False, balanced=False)
    template = adapter.from_canonical(dict(view_a), ma)
    m = LearnedMatcher([view_a, view_b], adapter, arch, template, SimpleNamespace(task="lm"), [init],
                       device=torch.device(device))
    data = {k: v.to(device) for k, v in _tokens(template.config.vocab_size, batch, context).items()}
    seconds = timed_steps(m, data, steps, device)
    # the exact transform the latents project to, applied to B: its function must be B's
    moved = m.transforms()[-1].apply(canonical_cpu_view(adapter, mb), arch)
    moved = adapter.from_canonical(moved, mb).to(device)
    return {"seconds_per_step": seconds, "max_dlogits": max_logit_change(mb, moved)}


def step_barrier(a: Path, b: Path, device: str, batch: int, context: int, points: int, **_) -> dict:
    """The loss along the straight line between the pair at `points` λ, on batches of random tokens."""
    import glmc
    from glmc.paths.barrier import path_curve

    models = [glmc.load_model(p, device=device) for p in (a, b)]
    vocab = models[0].config.vocab_size
    batches = [{k: v.to(device) for k, v in _tokens(vocab, batch, context, seed).items()} for seed in range(2)]
    t0 = time.perf_counter()
    curve = path_curve(models, batches, "lm", points=points, progress=False)
    _sync(device)
    return {"seconds": time.perf_counter() - t0, "points": points, "loss_mid": curve["loss"][points // 2]}


RUNNERS = {"align": step_align, "learned-step": step_learned, "barrier": step_barrier}


def run_step(args, kind: str, name: str) -> dict:
    """One step in a child process (its own peak memory); a failure is a row with the error's last line."""
    cmd = [sys.executable, __file__, "--step", kind, name, "--device", args.device, "--cache", str(args.cache),
           "--batch", str(args.batch), "--context", str(args.context), "--steps", str(args.steps),
           "--points", str(args.points)] + (["--quick"] if args.quick else [])
    print("+", kind, name, flush=True)
    wall, peak, code, out = run_measured(cmd, capture=True)
    row = {"step": kind, "pair": name, "wall_seconds": wall, "peak_rss_gb": peak, "ok": code == 0}
    lines = out.strip().splitlines()
    if code == 0 and lines:
        row.update(json.loads(lines[-1]))
    else:
        row["error"] = f"exit status {code}"
    print(json.dumps(row), flush=True)
    return row


def table(rows: list) -> str:
    head = ["step", "pair", "ok", "seconds", "s / step", "wall s", "peak RSS GB", "peak device GB",
            "max \\|Δlogits\\|"]

    def f(x, spec):
        return "" if x is None else format(x, spec)

    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["step"], r["pair"], "yes" if r["ok"] else r.get("error", "no"), f(r.get("seconds"), ".1f"),
                 f(r.get("seconds_per_step"), ".2f"), f(r["wall_seconds"], ".1f"), f(r["peak_rss_gb"], ".2f"),
                 f(r.get("device_peak_gb"), ".2f"), f(r.get("max_dlogits"), ".1e")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="Tiny shapes: every step in seconds on a CPU.")
    ap.add_argument("--cache", type=Path, default=Path("runs/scale"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/gpu"))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3, help="Timed learned-matching steps (after a warm-up).")
    ap.add_argument("--points", type=int, default=5, help="λ points of the barrier curve.")
    ap.add_argument("--only", help="Run only the steps whose 'STEP PAIR' contains this text.")
    ap.add_argument("--step", nargs=2, metavar=("STEP", "PAIR"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.cache = args.cache / "quick"
        args.batch, args.context = min(args.batch, 2), min(args.context, 32)
    if args.step:
        kind, name = args.step
        a, b = pair(args.cache, name, args.quick)
        row = RUNNERS[kind](a, b, args.device, batch=args.batch, context=args.context, steps=args.steps,
                            points=args.points)
        row["device_peak_gb"] = _device_peak(args.device)
        print(json.dumps(row))
        return 0
    from glmc.provenance import provenance

    for _, name in STEPS:  # built before any step is timed
        pair(args.cache, name, args.quick)
    rows = [run_step(args, kind, name) for kind, name in STEPS if not args.only or args.only in f"{kind} {name}"]
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"rows": rows, "quick": args.quick, "provenance": provenance(options=vars(args) | {
        "cache": str(args.cache), "out": str(args.out)}, device=args.device)}
    (args.out / "gpu_scale.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    (args.out / "gpu_scale.md").write_text(table(rows))
    print(table(rows))
    return sum(not r["ok"] for r in rows)


if __name__ == "__main__":
    sys.exit(main())
