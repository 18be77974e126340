"""The scale guide's table, generated from the scale benchmarks' result files (benchmarks/results/scale/*.json,
written by benchmarks/scale.py and scale_neox.py), which must come from one clean commit: a figure is never typed.

    python benchmarks/scale_table.py        # rewrite the block in docs/guide/scale.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "scale"
GUIDE = ROOT / "docs" / "guide" / "scale.md"
RUNS = ("scale", "scale-neox-410m", "scale-llama-1b")  # GPT-2-124M, Pythia-410M, TinyLlama-1.1B shapes
BEGIN, END = "<!-- generated from benchmarks/results/scale: {} -->", "<!-- end of generated {} -->"


def load(results=RESULTS) -> list[dict]:
    rows = [json.loads((Path(results) / f"{name}.json").read_text()) for name in RUNS]
    codes = {(r.get("provenance") or {}).get("code", {}).get("commit") for r in rows}
    if None in codes or len(codes) != 1:
        raise ValueError(f"the scale results come from different codes ({sorted(map(str, codes))}): rerun them at one "
                         "commit")
    if any(r["provenance"]["code"]["dirty"] for r in rows):
        raise ValueError("a scale result was made by a dirty tree: rerun it at a clean commit")
    return rows


def lines(rows: list[dict]) -> list[str]:
    out = ["| pair (random weights, float32) | params | command | wall s | peak RSS GB | notes |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        its = f"{r['iterations']} iterations, alignment {r['align_seconds']:.0f} s"
        out.append(f"| {r['model']} | {r['parameters'] / 1e6:.0f} M | `align --method weight` | "
                   f"{r['wall_seconds']:.0f} | {r['peak_rss_gb']:.2f} | {its}, max \\|Δlogits\\| "
                   f"{r['max_dlogits']:.1e} |")
        if "merge_wall_seconds" in r:
            out.append(f"| the same pair | {r['parameters'] / 1e6:.0f} M | `merge --method weight --rounds 1 "
                       f"--iterations {r['iterations']} --no-eval` | {r['merge_wall_seconds']:.0f} | "
                       f"{r['merge_peak_rss_gb']:.2f} | writes the merged model and both aligned ones |")
    code = rows[0]["provenance"]["code"]["commit"]
    return out + ["", f"One run per row at commit `{code[:10]}` (clean tree), {rows[0]['provenance']['created'][:10]}, "
                      f"each command alone on the machine ({rows[0]['provenance']['device'].get('threads', '?')} "
                      "threads)."]


def block(text: str, name: str = "scale") -> list[str]:
    begin, end = BEGIN.format(name), END.format(name)
    if begin not in text or end not in text:
        raise ValueError(f"no generated block {name!r} (markers {begin!r} … {end!r})")
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n").split("\n")


def publish(results=RESULTS, guide=GUIDE) -> None:
    text = Path(guide).read_text()
    block(text)
    begin, end = BEGIN.format("scale"), END.format("scale")
    head, rest = text.split(begin, 1)
    tmp = Path(guide).with_suffix(".md.tmp")
    tmp.write_text(head + begin + "\n" + "\n".join(lines(load(results))) + "\n" + end + rest.split(end, 1)[1])
    tmp.replace(guide)


if __name__ == "__main__":
    publish(*sys.argv[1:])
