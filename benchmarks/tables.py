"""The published tables, generated from one suite results file: the README's results table and docs/results.md's
evaluation-pair block. `python benchmarks/suite.py … --publish` writes them; tests/meta/test_published_tables.py
checks that the files hold exactly what `benchmarks/results/suite.json` gives, from one run at one clean commit.

    python benchmarks/tables.py            # rewrite both blocks from benchmarks/results/suite.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "benchmarks" / "results" / "suite.json"
README, RESULTS = ROOT / "README.md", ROOT / "docs" / "results.md"
BEGIN, END = "<!-- generated from benchmarks/results/suite.json: {} -->", "<!-- end of generated {} -->"
FAMILIES = {"gpt2": "GPT-2", "vit": "ViT", "neox": "GPT-NeoX", "qwen3": "Qwen3", "gemma": "Gemma", "olmo": "OLMo",
            "bert": "BERT", "roberta": "RoBERTa"}
METHOD_LABELS = {"activation-perm": "activation-perm (Verma & Elbayad)", "activation": "activation",
                 "weight": "weight", "weight-circuit": "weight (circuit)", "learned": "learned",
                 "learned-perm": "learned-perm"}
README_METHODS = ("activation", "weight", "weight-circuit", "learned")
VARIANT_METHODS = {"weight-circuit": "weight", "activation-perm": "activation"}  # suite.py's VARIANTS


def load(path=SUITE) -> dict:
    return json.loads(Path(path).read_text())


def one_run(suite: dict) -> dict:
    """The code every row came from: {"commit", "dirty"}; ValueError unless it is one commit, clean."""
    codes = {json.dumps((r.get("provenance") or {}).get("code"), sort_keys=True) for r in suite["rows"]}
    if len(codes) != 1:
        raise ValueError(f"the suite's rows come from {len(codes)} different codes: {sorted(codes)}")
    code = json.loads(codes.pop())
    if not code or code.get("dirty") is not False:
        raise ValueError(f"the suite's rows do not come from a clean commit: {code}")
    return code


def _pct(rows) -> list:
    """% of the pair's vanilla barrier, per row."""
    vanilla = {r["pair"]: r["barrier"] for r in rows if r["method"] == "none"}
    return [(r, 100 * r["barrier"] / vanilla[r["pair"]]) for r in rows if r["method"] != "none"]


def _families(suite) -> list[str]:
    seen = list(dict.fromkeys(r["family"] for r in suite["rows"]))
    return [f for f in FAMILIES if f in seen] + [f for f in seen if f not in FAMILIES]


def _cell(values: list) -> str:
    if not values:
        return "–"
    return f"{statistics.median(values):.1f}" + (f" ({max(values):.1f})" if len(values) > 1 else "")


def _methods(suite) -> list[str]:
    seen = {r["method"] for r in suite["rows"]}
    return [m for m in METHOD_LABELS if m in seen]


def summary_lines(suite: dict, methods) -> list[str]:
    """Median % of vanilla (worst pair) per family and method."""
    pct = _pct(suite["rows"])
    lines = ["| family | " + " | ".join(METHOD_LABELS[m] for m in methods) + " |",
             "|---|" + "---|" * len(methods)]
    for fam in _families(suite):
        pairs = {r["pair"] for r in suite["rows"] if r["family"] == fam}
        cells = [_cell([p for r, p in pct if r["family"] == fam and r["method"] == m]) for m in methods]
        lines.append(f"| {FAMILIES.get(fam, fam)} ({len(pairs)} pair{'s' if len(pairs) > 1 else ''}) | "
                     + " | ".join(cells) + " |")
    return lines


def provenance_line(suite: dict) -> str:
    code = one_run(suite)
    p = suite["provenance"]
    v = p["versions"]
    argv = " ".join(p["options"]["argv"])
    date = p["created"][:10]
    return (f"One run: `python benchmarks/suite.py {argv}` at commit `{code['commit'][:10]}` (clean tree), "
            f"glmc {p['glmc']}, torch {v['torch']}, transformers {v['transformers']}, {p['device']['threads']} CPU "
            f"threads, finished {date}; every row's provenance (options, data hash, model fingerprints) in "
            "`benchmarks/results/suite.json`.")


def readme_lines(suite: dict) -> list[str]:
    return ["Median % of the vanilla barrier (worst pair in brackets), test split of evaluation pairs that tuned "
            "nothing (learned matching at its default 300 steps; encoders: the masked-LM loss):", "",
            *summary_lines(suite, [m for m in README_METHODS if m in _methods(suite)]), "", provenance_line(suite)]


def results_lines(suite: dict) -> list[str]:
    methods = _methods(suite)
    pct = {(r["pair"], r["method"]): p for r, p in _pct(suite["rows"])}
    rows = {(r["pair"], r["method"]): r for r in suite["rows"]}
    lines = ["Median % of the vanilla barrier (worst pair in brackets):", "", *summary_lines(suite, methods), "",
             "Per pair: the vanilla barrier ± its standard error over test batches, then each method's barrier as a "
             "% of it (alignment seconds in brackets):", "",
             "| pair | vanilla ± se | " + " | ".join(METHOD_LABELS[m] for m in methods) + " | peak RSS MB |",
             "|---|---|" + "---|" * (len(methods) + 1)]
    for pair in dict.fromkeys(r["pair"] for r in suite["rows"]):
        van = rows[(pair, "none")]
        se = van.get("barrier_se")
        cells = [f"{pct[(pair, m)]:.1f} ({rows[(pair, m)]['align_s']:.0f})" if (pair, m) in pct else "–"
                 for m in methods]
        peak = max(r["peak_rss_mb"] for (p, _), r in rows.items() if p == pair)
        lines.append(f"| {pair} | {van['barrier']:.3f}" + (f" ± {se:.3f}" if se is not None else "") + " | "
                     + " | ".join(cells) + f" | {peak:.0f} |")
    return lines + ["", provenance_line(suite)]


def block(text: str, name: str) -> list[str]:
    """The lines between the markers of block `name` in `text`."""
    begin, end = BEGIN.format(name), END.format(name)
    if begin not in text or end not in text:
        raise ValueError(f"no generated block {name!r} (markers {begin!r} … {end!r})")
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n").split("\n")


def replace(path: Path, name: str, lines: list[str]) -> None:
    text = path.read_text()
    begin, end = BEGIN.format(name), END.format(name)
    block(text, name)  # the markers must be there
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(head + begin + "\n" + "\n".join(lines) + "\n" + end + tail)
    tmp.replace(path)


def publish(suite_path=SUITE, readme=README, results=RESULTS) -> None:
    suite = load(suite_path)
    one_run(suite)
    replace(Path(readme), "readme", readme_lines(suite))
    replace(Path(results), "results", results_lines(suite))


if __name__ == "__main__":
    publish(*sys.argv[1:])
