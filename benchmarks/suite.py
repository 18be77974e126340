"""Many-pair suite: alignment quality on independently trained pairs that differ in what matters.

Sixteen pairs of models (`PAIRS`): GPT-2 decoders of depth 2–6, width 64–256, 2–8 heads of 16–64 dimensions,
MLP ratio 2–4, GELU and ReLU, tied and untied heads, char / trained-BPE / GPT-2-BPE tokenizers, on Shakespeare
and on the Python standard library's sources; ViTs on MNIST, Fashion-MNIST and digits, HF and timm, class-token
and average pooling, patch sizes 2–14; training recipes varying steps, learning rate, weight decay and dropout.
Each pair is two models trained with `glmc train` from two seeds (cached under --cache; a missing model is
trained first).

The pairs are split once, by hand, into a **tuning** set (role "tune") and an **evaluation** set ("eval"), each
covering both families and most of the variations. Protocol (benchmarks/README.md): defaults are chosen on the
validation split of the tuning pairs only; figures are reported on the test split of the evaluation pairs.
`--split auto` (the default) does exactly that: tuning pairs are evaluated on "val", evaluation pairs on "test".

Per pair and method: the loss barrier of the linear path (11 points) as a % of the vanilla barrier, the
alignment's wall time and the peak resident memory of this process during it. Summary per family and role:
median and worst. Results are cached per pair, method and split under --cache/results (a rerun only computes
what is missing; --fresh recomputes). Writes suite.md and suite.json under --out.

    python benchmarks/suite.py                                  # everything (trains what is missing)
    python benchmarks/suite.py --role tune --methods none,weight  # the tuning pairs, validation split
    python benchmarks/suite.py --list                           # the pairs and their training commands
    python benchmarks/suite.py --role eval --publish          # the README's and docs/results.md's tables
Run it alone: two torch processes on 2 cores slow each other 7–12×.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from barriers import aligned_barrier  # noqa: E402  (benchmarks/ is the script's directory)

METHODS = ("none", "activation-perm", "activation", "weight", "weight-circuit", "learned", "learned-perm")
DEFAULT_METHODS = ("none", "activation", "weight", "weight-circuit", "learned")
# method name -> (glmc method, mode, options): variants measured beside the defaults
VARIANTS = {"weight-circuit": ("weight", "circuit", {}),
            # Verma & Elbayad's permutation-only setting, the encoder issue's anchor
            "activation-perm": ("activation", "native", {"residual": "permutation"})}


@dataclass(frozen=True)
class Pair:
    name: str
    role: str  # "tune" (defaults are chosen on its validation split) or "eval" (reported, test split)
    train: tuple[str, ...]  # `glmc train` arguments, seed excluded
    seeds: tuple[int, int]
    what: str  # what sets this pair apart, for the report

    @property
    def family(self) -> str:
        """The `glmc train` sub-command: one family row each in the summary (HF and timm ViTs share "vit")."""
        return self.train[0]


def _pair(name, role, what, *train):
    return Pair(name, role, tuple(str(a) for a in train), (10, 11) if role == "tune" else (0, 1), what)


# Budgets keep each model at about a minute on 2 cores; the CPU presets' batch sizes and warmups otherwise.
PAIRS = [
    # --- GPT-2, tuning ---
    _pair("g2-shk-char-L2-w64", "tune", "2 layers, 2 heads of 32, tied, GELU",
          "gpt2", "--data", "shakespeare", "--layers", 2, "--width", 64, "--heads", 2, "--mlp", 256, "--steps", 500),
    _pair("g2-shk-gpt2bpe-L2-w128", "tune", "GPT-2 BPE, untied, 2 heads of 64, MLP ×2, context 64",
          "gpt2", "--data", "shakespeare", "--tokenizer", "gpt2", "--untied", "--context", 64, "--layers", 2,
          "--width", 128, "--heads", 2, "--mlp", 256, "--batch-size", 16, "--lr", 1e-3, "--steps", 300),
    _pair("g2-stdlib-bpe-L3-w128-relu", "tune", "code, trained BPE 512, ReLU, dropout 0.1",
          "gpt2", "--data", "python-stdlib", "--tokenizer", "bpe:512", "--layers", 3, "--width", 128, "--heads", 4,
          "--mlp", 512, "--activation", "relu", "--dropout", 0.1, "--steps", 300),
    # --- GPT-2, evaluation ---
    _pair("g2-shk-char-L4-w128", "eval", "the CPU preset at 300 steps (4 heads of 32, tied)",
          "gpt2", "--data", "shakespeare", "--steps", 300),
    _pair("g2-shk-char-L4-w128-untied-relu", "eval", "untied, ReLU, lr 1e-3, weight decay 0.1",
          "gpt2", "--data", "shakespeare", "--untied", "--activation", "relu", "--lr", 1e-3, "--weight-decay", 0.1,
          "--steps", 400),
    _pair("g2-stdlib-bpe-L3-w96-h6", "eval", "code, trained BPE 512, 6 heads of 16, dropout 0.1",
          "gpt2", "--data", "python-stdlib", "--tokenizer", "bpe:512", "--layers", 3, "--width", 96, "--heads", 6,
          "--mlp", 384, "--dropout", 0.1, "--steps", 300),
    _pair("g2-stdlib-char-L6-w64", "eval", "code, char, 6 layers, 4 heads of 16, MLP ×2, lr 3e-3",
          "gpt2", "--data", "python-stdlib", "--layers", 6, "--width", 64, "--heads", 4, "--mlp", 128, "--lr", 3e-3,
          "--steps", 400),
    _pair("g2-shk-bpe-L2-w256-h8", "eval", "trained BPE 1024, width 256, 8 heads of 32, GELU (exact), untied",
          "gpt2", "--data", "shakespeare", "--tokenizer", "bpe:1024", "--untied", "--activation", "gelu",
          "--layers", 2, "--width", 256, "--heads", 8, "--mlp", 1024, "--lr", 1e-3, "--steps", 250),
    # --- ViT, tuning ---
    _pair("vit-digits-hf-p2-L2-w64", "tune", "digits, patch 2, 4 heads of 16",
          "vit", "--data", "digits", "--patch", 2, "--layers", 2, "--width", 64, "--heads", 4, "--mlp", 128,
          "--epochs", 30),
    _pair("vit-mnist-timm-avg-p7-L4-w96", "tune", "timm, average pooling, 6 heads of 16",
          "vit", "--data", "mnist", "--family", "timm", "--pool", "avg", "--layers", 4, "--width", 96, "--heads", 6,
          "--mlp", 192, "--epochs", 1),
    _pair("vit-fashion-hf-p14-L2-w256", "tune", "Fashion-MNIST, patch 14, width 256, 8 heads of 32, ReLU",
          "vit", "--data", "fashion-mnist", "--patch", 14, "--layers", 2, "--width", 256, "--heads", 8, "--mlp", 512,
          "--activation", "relu", "--epochs", 1),
    # --- ViT, evaluation ---
    _pair("vit-mnist-hf-p7-L4-w128", "eval", "the CPU preset at 1 epoch",
          "vit", "--data", "mnist", "--epochs", 1),
    _pair("vit-fashion-hf-p4-L3-w64-relu", "eval", "Fashion-MNIST, patch 4, 2 heads of 32, ReLU, dropout 0.1",
          "vit", "--data", "fashion-mnist", "--patch", 4, "--layers", 3, "--width", 64, "--heads", 2, "--mlp", 256,
          "--activation", "relu", "--dropout", 0.1, "--epochs", 1),
    _pair("vit-fashion-timm-p7-L6-w128-h8", "eval", "timm, Fashion-MNIST, 6 layers, 8 heads of 16, lr 5e-4",
          "vit", "--data", "fashion-mnist", "--family", "timm", "--layers", 6, "--width", 128, "--heads", 8,
          "--mlp", 256, "--lr", 5e-4, "--epochs", 1),
    _pair("vit-digits-timm-avg-p4-L3-w128", "eval", "timm, digits, average pooling, patch 4, no weight decay",
          "vit", "--data", "digits", "--family", "timm", "--pool", "avg", "--patch", 4, "--layers", 3,
          "--width", 128, "--heads", 4, "--mlp", 512, "--weight-decay", 0, "--epochs", 30),
    _pair("vit-mnist-timm-p14-L2-w64-h2", "eval", "timm, patch 14, 2 heads of 32, ReLU",
          "vit", "--data", "mnist", "--family", "timm", "--patch", 14, "--layers", 2, "--width", 64, "--heads", 2,
          "--mlp", 256, "--activation", "relu", "--epochs", 1),
    # --- GPT-NeoX (Pythia's structure: parallel blocks, partial rotary) ---
    _pair("neox-shk-char-L2-w64", "tune", "2 layers, 4 heads of 16, rotary 0.25, parallel",
          "neox", "--data", "shakespeare", "--layers", 2, "--width", 64, "--heads", 4, "--mlp", 256, "--steps", 400),
    _pair("neox-shk-char-L4-w128", "eval", "the CPU preset at 300 steps (rotary 0.25, parallel, untied)",
          "neox", "--data", "shakespeare", "--steps", 300),
    _pair("neox-stdlib-bpe-L3-w96-seq", "eval", "code, trained BPE 512, sequential blocks, whole heads rotary",
          "neox", "--data", "python-stdlib", "--tokenizer", "bpe:512", "--layers", 3, "--width", 96, "--heads", 4,
          "--mlp", 384, "--sequential", "--rotary", 1.0, "--steps", 300),
    _pair("neox-shk-bpe-L2-w128-h8", "eval", "trained BPE 1024, 8 heads of 16, rotary 0.5",
          "neox", "--data", "shakespeare", "--tokenizer", "bpe:1024", "--layers", 2, "--width", 128, "--heads", 8,
          "--mlp", 512, "--rotary", 0.5, "--steps", 300),
    # --- QK-norm, Gemma and OLMo decoders (their CPU presets at 300 steps; no default was tuned on them) ---
    _pair("qwen3-shk-char-L4-w128", "eval", "QK-norm, 4 query / 2 key-value heads",
          "qwen3", "--data", "shakespeare", "--steps", 300),
    _pair("gemma-shk-char-L4-w128", "eval", "1 + w gains, √d embeddings, tied, multi-query",
          "gemma", "--data", "shakespeare", "--steps", 300),
    _pair("olmo-shk-char-L4-w128", "eval", "parameter-free LayerNorms, clip_qkv 8",
          "olmo", "--data", "shakespeare", "--steps", 300),
    # --- post-LN encoders with the masked-LM task (their CPU presets) ---
    _pair("bert-shk-L3-w96", "tune", "3 layers, width 96, 4 heads of 24, MLP 384, the CPU preset otherwise",
          "bert", "--data", "shakespeare", "--layers", 3, "--width", 96, "--heads", 4, "--mlp", 384),
    _pair("bert-shk-L4-w128", "eval", "the CPU preset (WordPiece 2000, tied decoder, context 64)",
          "bert", "--data", "shakespeare"),
    _pair("bert-stdlib-L4-w128", "eval", "code, the CPU preset",
          "bert", "--data", "python-stdlib"),
    _pair("bert-shk-L2-w128-untied-relu", "eval", "2 layers, untied decoder, ReLU",
          "bert", "--data", "shakespeare", "--layers", 2, "--untied", "--activation", "relu"),
    _pair("roberta-shk-L4-w128", "eval", "RoBERTa, byte-level BPE 2000, the CPU preset",
          "roberta", "--data", "shakespeare"),
]
FAMILY_ORDER = list(dict.fromkeys(p.family for p in PAIRS))


def train_command(pair: Pair, seed: int, out: Path) -> list[str]:
    glmc = str(Path(sys.executable).with_name("glmc"))
    return [glmc, "train", *pair.train, "--seed", str(seed), "--out", str(out), "--quiet"]


# encoders train their own tokenizer, and the tokenizers package's WordPiece trainer is not deterministic across
# processes: the second seed reads the first one's tokenizer, as MultiBERTs' seeds share one
SHARED_TOKENIZER = ("bert", "roberta")


def train_pair(pair: Pair, cache: Path) -> list[Path]:
    paths = []
    for seed in pair.seeds:
        out = cache / "models" / f"{pair.name}-seed{seed}"
        if not (out / "glmc.json").is_file():
            cmd = train_command(pair, seed, out)
            if paths and pair.family in SHARED_TOKENIZER:
                cmd += ["--tokenizer", f"pretrained:{paths[0]}"]
            print("+", " ".join(cmd[1:]), flush=True)
            subprocess.run(cmd + ["--overwrite"], check=True)
        paths.append(out)
    return paths


class PeakRSS:
    """Peak resident memory of this process while the block runs (sampled every 10 ms; Linux /proc)."""

    def __enter__(self):
        self.peak, self._stop = rss_mb(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, rss_mb())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb())


def rss_mb() -> float:
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except OSError:
        return float("nan")
    import os

    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def split_of(pair: Pair, split: str) -> str:
    return ("val" if pair.role == "tune" else "test") if split == "auto" else split


def run_method(pair: Pair, method: str, split: str, models, ds, batches, options: dict, paths=()) -> dict:
    import torch

    from glmc.matching import align, method_options
    from glmc.provenance import full_options, provenance

    name, mode, extra = VARIANTS.get(method, (method, "native", {}))
    torch.manual_seed(0)
    resolved = method_options(name, dict(data=ds, progress=False, mode=mode, **extra, **options))
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        al = align(*models, name, **resolved)
        seconds = time.perf_counter() - t0
    curve, m, _ = aligned_barrier(al, mode, batches, ds.task)
    rep = al.report
    return {"pair": pair.name, "family": pair.family, "role": pair.role, "split": split, "method": method,
            "barrier": m["loss_barrier"], "barrier_se": m.get("loss_barrier_se"),
            "loss_endpoints": m["loss_endpoints"], "acc_drop": m.get("acc_drop"), "acc_drop_se": m.get("acc_drop_se"),
            "curve": {"lambdas": curve["lambdas"], "loss": curve["loss"], "acc": curve["acc"],
                      "loss_se": m.get("loss_se"), "acc_se": m.get("acc_se")},
            "align_s": seconds, "peak_rss_mb": mem.peak, "steps": rep.get("steps"),
            "seconds_per_step": rep.get("seconds_per_step"),
            "max_dlogits": rep.get("max_dlogits_b"), "chosen": rep.get("chosen"), "options": options,
            "provenance": provenance(options=full_options(name, {"mode": mode, **resolved}), seeds=[0],
                                     data={"spec": ds.spec, "batches": batches}, models=paths, device="cpu")}


def same_code(row: dict, code: dict | None) -> bool:
    """A cached row is reused only when this very code computed it: the same commit, both trees clean."""
    theirs = (row.get("provenance") or {}).get("code")
    return bool(code and theirs and theirs.get("commit") == code["commit"] and not theirs.get("dirty")
                and not code["dirty"])


def run_pair(pair: Pair, methods, split: str, cache: Path, max_batches: int, fresh: bool, options: dict,
             tag: str, reuse_any: bool = False) -> list[dict]:
    import glmc.data
    from glmc.errors import UnsupportedModel
    from glmc.models import load_model
    from glmc.provenance import code_state

    split = split_of(pair, split)
    paths = train_pair(pair, cache)
    store = cache / "results" / pair.name
    store.mkdir(parents=True, exist_ok=True)
    rows, loaded = [], None
    for method in methods:
        tagged = tag and method != "none"  # the vanilla barrier takes no option: one file serves every tag
        f = store / f"{method}{'-' + tag if tagged else ''}-{split}.json"
        if f.is_file() and not fresh:
            cached = json.loads(f.read_text())
            if reuse_any or same_code(cached, code_state()):
                rows.append(cached)
                continue
            print(f"{pair.name} {method}: cached by other code, recomputed (--reuse-any keeps it)", flush=True)
        if loaded is None:
            models = [load_model(p)[0] for p in paths]
            ds = glmc.data.load_for_model(paths[0])
            batches = list(ds.batches(split, 32, max_batches=max_batches, shuffle=False))
            loaded = models, ds, batches
        try:
            row = run_method(pair, method, split, *loaded, options if method != "none" else {}, paths=paths)
        except UnsupportedModel as e:  # e.g. circuit mode under RoPE: the family refuses it by name
            print(f"{pair.name} {method}: refused ({e})", flush=True)
            continue
        row["tag"] = tag if tagged else ""
        tmp = f.with_suffix(".tmp")
        tmp.write_text(json.dumps(row, indent=1))
        tmp.replace(f)
        print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()
                          if k not in ("provenance", "options", "curve")}), flush=True)
        rows.append(row)
    vanilla = next((r["barrier"] for r in rows if r["method"] == "none"), None)
    for r in rows:
        r["pct_of_vanilla"] = 100 * r["barrier"] / vanilla if vanilla else None
    return rows


def methods_for(pair: Pair, entries) -> list[str]:
    """The methods of `pair` from --methods entries: METHOD for every pair, FAMILY:METHOD for that family's
    pairs only (e.g. bert:activation-perm, the encoders' anchor); "none" first."""
    mine = [e.split(":")[-1] for e in entries if ":" not in e or e.split(":")[0] == pair.family]
    return list(dict.fromkeys(["none", *mine]))


def summarise(rows: list[dict], methods) -> list[dict]:
    """Median and worst % of vanilla per family, role and method."""
    out = []
    for family in FAMILY_ORDER:
        for role in ("tune", "eval"):
            for method in methods:
                pcts = [r["pct_of_vanilla"] for r in rows if (r["family"], r["role"], r["method"]) ==
                        (family, role, method) and r["pct_of_vanilla"] is not None]
                if pcts and method != "none":
                    secs = [r["align_s"] for r in rows if (r["family"], r["role"], r["method"]) ==
                            (family, role, method)]
                    out.append({"family": family, "role": role, "method": method, "pairs": len(pcts),
                                "median_pct": statistics.median(pcts), "worst_pct": max(pcts),
                                "median_align_s": statistics.median(secs)})
    return out


def write(rows, summary, methods, out: Path, name: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    by_pair: dict[str, dict] = {}
    for r in rows:
        by_pair.setdefault(r["pair"], {})[r["method"]] = r
    md = ["Median % of the vanilla barrier (worst pair in brackets):", "",
          "| family | pairs (split) | " + " | ".join(m for m in methods if m != "none") + " |",
          "|---|---|" + "---|" * (len(methods) - 1)]
    for family in FAMILY_ORDER:
        for role in ("tune", "eval"):
            cells = []
            for m in methods:
                if m == "none":
                    continue
                s = next((s for s in summary if (s["family"], s["role"], s["method"]) == (family, role, m)), None)
                cells.append(f"{s['median_pct']:.1f} ({s['worst_pct']:.1f})" if s else "–")
            if any(c != "–" for c in cells):
                split = "val" if role == "tune" else "test"
                md.append(f"| {family} | {role} ({split}) | " + " | ".join(cells) + " |")
    md += ["", "| pair | role | split | vanilla barrier | " +
           " | ".join(f"{m} % (s)" for m in methods if m != "none") + " | peak RSS MB |",
           "|---|---|---|---|" + "---|" * len(methods)]
    for pair in PAIRS:
        got = by_pair.get(pair.name)
        if not got:
            continue
        first = next(iter(got.values()))
        vanilla = got.get("none", {}).get("barrier")
        cells = [f"{got[m]['pct_of_vanilla']:.1f} ({got[m]['align_s']:.0f})" if m in got and
                 got[m]["pct_of_vanilla"] is not None else "–" for m in methods if m != "none"]
        peak = max(r["peak_rss_mb"] for r in got.values())
        van = "–" if vanilla is None else f"{vanilla:.3f}"
        md.append(f"| {pair.name} | {pair.role} | {first['split']} | {van} | " + " | ".join(cells) + f" | {peak:.0f} |")
    tuned = [p.name for p in PAIRS if p.role == "tune"]
    md += ["", f"The defaults were chosen on the validation split of the tuning pairs ({', '.join(tuned)}); "
           "no choice was made on the evaluation pairs."]
    (out / f"{name}.md").write_text("\n".join(md) + "\n")
    (out / f"{name}.json").write_text(json.dumps({"schema": "glmc.suite/1", "provenance": run_provenance(rows),
                                                  "summary": summary, "rows": rows}, indent=1, default=str))
    print("\n".join(md))
    return md


def run_provenance(rows) -> dict:
    """The report's own provenance, with the code behind every row: one commit, clean, for a published table."""
    from glmc.provenance import provenance

    codes = {json.dumps((r.get("provenance") or {}).get("code"), sort_keys=True) for r in rows}
    return {**provenance(options={"argv": sys.argv[1:]}), "row_codes": sorted(codes)}


def list_pairs() -> None:
    print("| pair | role | seeds | what | glmc train … |\n|---|---|---|---|---|")
    for p in PAIRS:
        print(f"| {p.name} | {p.role} | {p.seeds[0]} / {p.seeds[1]} | {p.what} | `{' '.join(p.train)}` |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", default="", help="comma-separated pair names (default: all of --role)")
    ap.add_argument("--role", choices=["tune", "eval", "all"], default="all")
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    ap.add_argument("--families", default="", help="comma-separated families (gpt2, vit, neox, …; default: all)")
    ap.add_argument("--split", choices=["auto", "val", "test"], default="auto",
                    help="auto: tuning pairs on val, evaluation pairs on test (the protocol)")
    ap.add_argument("--max-batches", type=int, default=20, help="batches of 32 per λ point")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="an alignment option for every method that takes it (e.g. lr=0.01); use with --tag")
    ap.add_argument("--tag", default="", help="name of this option set: its results are cached apart")
    ap.add_argument("--cache", type=Path, default=Path("runs/suite"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--name", default="suite", help="report name under --out")
    ap.add_argument("--fresh", action="store_true", help="recompute cached results")
    ap.add_argument("--reuse-any", action="store_true",
                    help="reuse cached results computed by other code (another commit or a dirty tree); by default "
                    "a report holds only results of the code that writes it")
    ap.add_argument("--publish", action="store_true",
                    help="also regenerate the README's and docs/results.md's tables from this report "
                    "(benchmarks/tables.py; refused unless every row comes from one clean commit)")
    ap.add_argument("--train-only", action="store_true", help="train the missing models and stop")
    ap.add_argument("--list", action="store_true", help="print the pairs and stop")
    args = ap.parse_args(argv)
    if args.list:
        return list_pairs()
    if args.option and not args.tag:
        ap.error("--option needs a --tag, so its results are not mistaken for the defaults'")
    options = {k: _value(v) for k, v in (o.split("=", 1) for o in args.option)}
    names = [n for n in args.pairs.split(",") if n]
    unknown = set(names) - {p.name for p in PAIRS}
    if unknown:
        ap.error(f"unknown pair(s) {', '.join(sorted(unknown))}; see --list")
    families = [f for f in args.families.split(",") if f]
    pairs = [p for p in PAIRS if (p.name in names if names else args.role in ("all", p.role))
             and (not families or p.family in families)]
    entries = [m for m in args.methods.split(",") if m]
    methods = list(dict.fromkeys(m.split(":")[-1] for m in entries))
    if set(methods) - set(METHODS):
        ap.error(f"unknown method(s) {', '.join(sorted(set(methods) - set(METHODS)))}; choose from {METHODS}")
    if "none" not in methods:
        methods = ["none"] + methods  # the vanilla barrier every % is of
    if args.train_only:
        for p in pairs:
            train_pair(p, args.cache)
        return None
    rows = []
    for p in pairs:
        mine = methods_for(p, entries)
        rows += run_pair(p, mine, args.split, args.cache, args.max_batches, args.fresh, options, args.tag,
                         args.reuse_any)
    write(rows, summarise(rows, methods), methods, args.out, args.name)
    if args.publish:
        import tables

        tables.publish(args.out / f"{args.name}.json")
    return None


def _value(v: str):
    if v in ("True", "False"):
        return v == "True"
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


if __name__ == "__main__":
    sys.exit(main())
