"""Learned-matching step cost at a real model size, against one plain AdamW step of one model.

Builds (or reuses, from benchmarks/scale.py's cache) two random-weight GPT-2-124M-shaped checkpoints, then in two
child processes, each measured alone (wall time per step, peak resident memory from wait4):
  plain    one AdamW step of model A on a batch of random tokens (forward to the logits, F.cross_entropy,
           backward, step): a user's plain training step
  learned  one learned-matching step (LearnedMatcher.train_step: project the latents, build π(θ_B), interpolate
           at λ = ½, forward, backward into the latents, AdamW step), started from one weight-matching iteration
  learned-checkpoint  the same step with gradient checkpointing (`glmc align --checkpoint`)
Both use the same batch (default 8 × 256 tokens). The first step of each is a warm-up and is not timed. Writes
learned_step.md / learned_step.json under --out.

    python benchmarks/learned_step.py                 # 124M, batch 8 × 256, 3 timed steps
    python benchmarks/learned_step.py --pythia 160m   # GPT-NeoX shaped like Pythia-160M (benchmarks/scale_neox.py)
Run it alone: two torch processes on 2 cores slow each other 7–12×.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import build_pair, run_measured, shape_parser, write_report  # noqa: E402
from scale_neox import PYTHIA  # noqa: E402
from scale_neox import build_pair as build_neox_pair  # noqa: E402

PARTS = ("plain", "learned", "learned-checkpoint")


def _batch(vocab: int, batch: int, context: int):
    import torch

    ids = torch.randint(0, vocab, (batch, context + 1), generator=torch.Generator().manual_seed(0))
    return {"input_ids": ids[:, :-1], "targets": ids[:, 1:]}


def part_plain(a_path: str, batch: int, context: int, steps: int, device: str) -> dict:
    import torch
    import torch.nn.functional as F

    from glmc.api import load_model
    from glmc.models.evaluate import forward_logits

    model = load_model(a_path, device=device)
    data = _batch(model.config.vocab_size, batch, context)
    for p in model.parameters():
        p.requires_grad_(True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        logits = forward_logits(model, data)  # what a user's training step does: the logits, then the loss
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), data["targets"].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        _sync(device)
        if i:
            times.append(time.perf_counter() - t0)
    return {"seconds_per_step": sum(times) / len(times)}


def part_learned(a_path: str, b_path: str, batch: int, context: int, steps: int, device: str,
                 checkpoint: bool = False) -> dict:
    from types import SimpleNamespace

    import torch

    from glmc.api import load_model
    from glmc.matching.alternation import weight_matching
    from glmc.matching.common import canonical_pair
    from glmc.matching.learned import LearnedMatcher

    a, b = load_model(a_path, device=device), load_model(b_path, device=device)
    adapter, arch, view_a, view_b = canonical_pair(a, b)
    init, _ = weight_matching(view_a, view_b, arch, iterations=1, progress=False, balanced=False)
    template = adapter.from_canonical(view_a, a)
    del a, b
    m = LearnedMatcher([view_a, view_b], adapter, arch, template, SimpleNamespace(task="lm"), [init],
                       device=torch.device(device), checkpoint=checkpoint)
    data = _batch(template.config.vocab_size, batch, context)
    return {"seconds_per_step": timed_steps(m, data, steps, device)}


def timed_steps(matcher, data, steps: int, device: str) -> float:
    """Mean seconds of `steps` learned-matching steps at λ = ½, after one warm-up step."""
    opt = matcher.optimizer()
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        matcher.train_step(data, [0.5, 0.5], opt)
        _sync(device)
        if i:
            times.append(time.perf_counter() - t0)
    return sum(times) / len(times)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_part(args, part: str) -> dict:
    cmd = [sys.executable, __file__, "--part", part, "--cache", str(args.cache), "--batch", str(args.batch),
           "--context", str(args.context), "--steps", str(args.steps), "--device", args.device]
    if args.pythia:
        cmd += ["--pythia", args.pythia]
    wall, peak, code, out = run_measured(cmd, capture=True)
    if code:
        raise SystemExit(f"{part} part failed (exit status {code})")
    row = json.loads(out.strip().splitlines()[-1])
    row.update(peak_rss_gb=peak, wall_seconds=wall)
    return row


def main(argv=None) -> None:
    ap = shape_parser(__doc__)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3, help="Timed steps (after one warm-up step).")
    ap.add_argument("--pythia", choices=sorted(PYTHIA), help="A GPT-NeoX pair shaped like this Pythia size instead.")
    ap.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.pythia:
        a, b = build_neox_pair(args.cache, args.pythia)
    else:
        a, b = build_pair(args.cache, args.layers, args.width, args.heads, args.vocab)
    if args.part == "plain":
        print(json.dumps(part_plain(str(a), args.batch, args.context, args.steps, args.device)))
        return
    if args.part:
        print(json.dumps(part_learned(str(a), str(b), args.batch, args.context, args.steps, args.device,
                                      checkpoint=args.part == "learned-checkpoint")))
        return
    rows = {part: run_part(args, part) for part in PARTS}
    ratio = rows["learned"]["seconds_per_step"] / rows["plain"]["seconds_per_step"]
    ratio_ckpt = rows["learned-checkpoint"]["seconds_per_step"] / rows["plain"]["seconds_per_step"]
    model = (f"GPT-NeoX shaped like Pythia-{args.pythia}" if args.pythia
             else f"GPT-2 {args.layers}×{args.width}, {args.heads} heads, vocab {args.vocab}, untied")
    result = {"model": model,
              "batch": args.batch, "context": args.context, "device": args.device, "timed_steps": args.steps,
              **{f"{k}_{part}": v for part, r in rows.items() for k, v in r.items()}, "ratio": ratio,
              "ratio_checkpoint": ratio_ckpt}
    write_report(args.out, f"learned_step-pythia-{args.pythia}" if args.pythia else "learned_step", result,
                 ["model", "batch × context", "device", "plain AdamW step s", "learned step s", "ratio",
                  "checkpointed step s", "ratio", "peak RSS plain GB", "peak RSS learned GB",
                  "peak RSS checkpointed GB"],
                 [result["model"], f"{args.batch} × {args.context}", args.device,
                  f"{rows['plain']['seconds_per_step']:.2f}", f"{rows['learned']['seconds_per_step']:.2f}",
                  f"{ratio:.2f}×", f"{rows['learned-checkpoint']['seconds_per_step']:.2f}", f"{ratio_ckpt:.2f}×",
                  f"{rows['plain']['peak_rss_gb']:.2f}", f"{rows['learned']['peak_rss_gb']:.2f}",
                  f"{rows['learned-checkpoint']['peak_rss_gb']:.2f}"])


if __name__ == "__main__":
    main()
