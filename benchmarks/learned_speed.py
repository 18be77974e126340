"""Learned matching's speed on the suite's pairs: one step against a plain AdamW step, and the steps a time budget
buys, against another checkout of glmc (e.g. the code when issue #15 was filed).

Per pair (benchmarks/suite.py's models, trained if missing):
  step     in this process: one plain AdamW step of model A (forward to the logits, F.cross_entropy, backward,
           step: a user's training step) and one learned-matching step (LearnedMatcher.train_step at λ = ½, from one
           weight-matching iteration) on the same training batch of the default size; alternating, after two
           warm-up steps each; the median of --steps
  budget   `glmc align A B --method learned --minutes M` in a child process: the steps it made and its seconds
           (align.json: the whole loop, validation included), as steps per minute on this machine; with
           --baseline SRC the same command with SRC (another checkout's src/ directory) first on PYTHONPATH
Writes learned_speed.md / learned_speed.json under --out.

    git worktree add /tmp/glmc-at-filing fa8f9fe   # the code when #15 was filed
    python benchmarks/learned_speed.py --baseline /tmp/glmc-at-filing/src
Run it alone: two torch processes on 2 cores slow each other 7–12×.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite import PAIRS, train_pair  # noqa: E402


def step_times(a_dir: Path, b_dir: Path, steps: int) -> dict:
    """Median seconds of a plain AdamW step and of a learned-matching step on the same batch."""
    import torch
    import torch.nn.functional as F

    import glmc.data
    from glmc.api import load_model
    from glmc.matching.alternation import weight_matching
    from glmc.matching.common import canonical_pair
    from glmc.matching.learned import LearnedMatcher
    from glmc.models.evaluate import forward_logits

    torch.manual_seed(0)
    a, b = load_model(a_dir), load_model(b_dir)
    data = glmc.data.load_for_model(a_dir)
    batch = next(iter(data.batches("train", 32, seed=0, shuffle=True)))
    target = batch["targets"] if "targets" in batch else batch["labels"]
    adapter, arch, view_a, view_b = canonical_pair(a, b)
    init, _ = weight_matching(view_a, view_b, arch, iterations=1, progress=False, balanced=False)
    matcher = LearnedMatcher([view_a, view_b], adapter, arch, adapter.from_canonical(view_a, a), data, [init])
    learned_opt = matcher.optimizer()
    for p in a.parameters():
        p.requires_grad_(True)
    plain_opt = torch.optim.AdamW(a.parameters(), lr=1e-4)

    def plain():
        logits = forward_logits(a, batch)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))
        plain_opt.zero_grad()
        loss.backward()
        plain_opt.step()

    def learned():
        matcher.train_step(batch, [0.5, 0.5], learned_opt)

    times = {"plain": [], "learned": []}
    for i in range(steps + 2):
        for name, fn in (("plain", plain), ("learned", learned)):
            t0 = time.perf_counter()
            fn()
            if i >= 2:
                times[name].append(time.perf_counter() - t0)
    return {f"{k}_step_s": statistics.median(v) for k, v in times.items()}


def budget_run(a_dir: Path, b_dir: Path, minutes: float, src: str | None) -> dict:
    """Steps and seconds of `glmc align --method learned --minutes M`, run with `src` first on the path."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in [env.get("PYTHONPATH")] if p])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "aligned"
        cmd = [sys.executable, "-c", "import sys; from glmc.cli import main; sys.exit(main())", "align", str(a_dir),
               str(b_dir), "--method", "learned", "--minutes", str(minutes), "--out", str(out)]
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        report = json.loads((out / "align.json").read_text())
    report = report.get("report", report)
    return {"steps": report["steps"], "seconds": report["seconds"],
            "steps_per_minute": 60 * report["steps"] / report["seconds"]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", default="", help="comma-separated pair names (default: the evaluation pairs)")
    ap.add_argument("--steps", type=int, default=10, help="Timed steps of each kind (after two warm-ups).")
    ap.add_argument("--minutes", type=float, default=1.0, help="The learned-matching budget per run.")
    ap.add_argument("--baseline", help="src/ directory of another glmc checkout to run the budget with too.")
    ap.add_argument("--cache", type=Path, default=Path("runs/suite"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args(argv)
    names = [n for n in args.pairs.split(",") if n]
    pairs = [p for p in PAIRS if p.name in names] if names else [p for p in PAIRS if p.role == "eval"]
    rows = []
    for pair in pairs:
        a_dir, b_dir = train_pair(pair, args.cache)
        row = {"pair": pair.name, "family": pair.family, **step_times(a_dir, b_dir, args.steps)}
        row["step_ratio"] = row["learned_step_s"] / row["plain_step_s"]
        row.update({f"now_{k}": v for k, v in budget_run(a_dir, b_dir, args.minutes, None).items()})
        if args.baseline:
            row.update({f"baseline_{k}": v for k, v in budget_run(a_dir, b_dir, args.minutes, args.baseline).items()})
            row["speedup"] = row["now_steps_per_minute"] / row["baseline_steps_per_minute"]
        print(json.dumps(row), flush=True)
        rows.append(row)
    write(rows, args)


def write(rows: list[dict], args) -> None:
    header = ["pair", "plain AdamW step ms", "learned step ms", "ratio", f"steps / min ({args.minutes:g} min budget)"]
    if args.baseline:
        header += ["baseline steps / min", "speed-up"]
    md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        cells = [r["pair"], f"{1000 * r['plain_step_s']:.0f}", f"{1000 * r['learned_step_s']:.0f}",
                 f"{r['step_ratio']:.2f}×", f"{r['now_steps_per_minute']:.0f}"]
        if args.baseline:
            cells += [f"{r['baseline_steps_per_minute']:.0f}", f"{r['speedup']:.2f}×"]
        md.append("| " + " | ".join(cells) + " |")
    for family in sorted({r["family"] for r in rows}):
        mine = [r for r in rows if r["family"] == family]
        line = (f"{family}: step ratio median {statistics.median(r['step_ratio'] for r in mine):.2f}× "
                f"(worst {max(r['step_ratio'] for r in mine):.2f}×)")
        if args.baseline:
            speedups = [r["speedup"] for r in mine]
            line += (f"; steps per minute against the baseline: median {statistics.median(speedups):.2f}× "
                     f"(least {min(speedups):.2f}×)")
        md += ["", line]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "learned_speed.json").write_text(json.dumps({"minutes": args.minutes, "baseline": args.baseline,
                                                             "rows": rows}, indent=1) + "\n")
    (args.out / "learned_speed.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
