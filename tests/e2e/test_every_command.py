"""Every command on every family added for the model suites and the encoders, on models `glmc train` trained:
align with each method (the written model loads with the Auto class and keeps its input's logits), the barrier,
a merge of three, narrow → wide where it is exact (refused in one line, naming why, where it is not) and
`glmc demo --family`. Tiny budgets: this checks that each command works end to end, not how well."""

import json
import math
import os

import pytest
import torch
from click.testing import CliRunner

from conftest import run_cli
from glmc.adapters.registry import adapter_named
from glmc.cli import main
from glmc.matching.common import max_logit_change
from glmc.models import load_model

pytestmark = pytest.mark.slow

SHAPE = ["--layers", 1, "--heads", 2, "--context", 32, "--steps", 30, "--batch-size", 16, "--eval-every", 30,
         "--eval-batches", 1, "--quiet"]
# width, MLP and the family's own options; `narrow`: how to train a narrower model of the same depth and head size
FAMILIES = {
    "neox": (["--mlp", 64, "--rotary", 0.5], ["--width", 32], ["--width", 16, "--heads", 1]),
    "qwen3": (["--mlp", 64, "--head-dim", 16, "--kv-heads", 1], ["--width", 32], ["--width", 16]),
    "gemma": (["--mlp", 64, "--head-dim", 16, "--kv-heads", 1], ["--width", 32], ["--width", 16]),
    "olmo": (["--mlp", 64, "--head-dim", 16, "--kv-heads", 2, "--clip-qkv", 1.0], ["--width", 32], ["--width", 16]),
    "bert": (["--mlp", 64, "--vocab", 300], ["--width", 32], ["--width", 16, "--heads", 1]),
    "roberta": (["--mlp", 64, "--vocab", 300], ["--width", 32], ["--width", 16, "--heads", 1]),
}
ENCODERS = ("bert", "roberta")
WIDENS = ("neox",)  # the others refuse narrow → wide by name (their norms' eps or √d scale depend on the width)
METHODS = ("weight", "activation", "learned", "learned-perm")
LEARNED = ["--steps", 4, "--eval-every", 4]


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    name = request.param
    own, wide, narrow = FAMILIES[name]
    root = tmp_path_factory.mktemp(name)
    for seed in (0, 1, 2):
        shared = ["--tokenizer", f"pretrained:{root / 's0'}"] if seed and name in ENCODERS else []
        run_cli("train", name, "--seed", seed, "--out", root / f"s{seed}", *SHAPE, *own, *wide, *shared)
    shared = ["--tokenizer", f"pretrained:{root / 's0'}"] if name in ENCODERS else []
    run_cli("train", name, "--seed", 3, "--out", root / "narrow", *SHAPE, *own, *narrow, *shared)
    return name, root


def _auto_class(name):
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    return AutoModelForMaskedLM if name in ENCODERS else AutoModelForCausalLM


def _loads_with_logits_of(directory, reference, name):
    hf = _auto_class(name).from_pretrained(directory).eval()
    assert type(hf) is type(reference)
    assert max_logit_change(reference, hf) <= 1e-4


def test_every_family_here_is_registered():
    for name in FAMILIES:
        assert adapter_named(name).family == name


@pytest.mark.parametrize("method", METHODS)
def test_align_with_each_method(family, method, tmp_path):
    name, root = family
    extra = LEARNED if method.startswith("learned") else ["--train-batches", 2] if method == "activation" else []
    run_cli("align", root / "s0", root / "s1", "--method", method, "--out", tmp_path / "al", "--no-progress",
            *extra)
    report = json.loads((tmp_path / "al" / "align.json").read_text())
    assert report["max_dlogits_b"] <= 1e-4
    _loads_with_logits_of(tmp_path / "al", load_model(root / "s1")[0], name)


def test_barrier(family, tmp_path):
    _, root = family
    run_cli("barrier", root / "s0", root / "s1", "--align", "none,weight", "--points", 3, "--max-batches", 2,
            "--json", tmp_path / "b.json", "--no-progress")
    res = json.loads((tmp_path / "b.json").read_text())["results"]
    assert set(res) == {"none", "weight"}
    for r in res.values():
        assert len(r["loss"]) == 3 and all(math.isfinite(x) for x in r["loss"] + r["acc"])
        chord = [(1 - t) * r["loss"][0] + t * r["loss"][-1] for t in r["lambdas"]]
        assert r["loss_barrier"] == pytest.approx(max(x - c for x, c in zip(r["loss"], chord)), abs=1e-9)
        assert r["loss_barrier"] >= 0 and r["loss_barrier_se"] >= 0
    # the alignment keeps both functions: the endpoints' losses are the unaligned pair's
    for end in (0, -1):
        assert res["weight"]["loss"][end] == pytest.approx(res["none"]["loss"][end], abs=1e-4)


def test_merge_of_three(family, tmp_path):
    name, root = family
    run_cli("merge", root / "s0", root / "s1", root / "s2", "--out", tmp_path / "m", "--rounds", 1,
            "--iterations", 2, "--max-batches", 1, "--no-progress")
    merged = _auto_class(name).from_pretrained(tmp_path / "m").eval()
    reference = load_model(root / "s0")[0]
    assert type(merged) is type(reference)
    assert all(p.shape == q.shape for p, q in zip(merged.parameters(), reference.parameters()))
    report = json.loads((tmp_path / "m" / "merge.json").read_text())
    assert report["weights"] == pytest.approx([1 / 3] * 3) and max(report["max_dlogits"]) <= 1e-4
    assert all(math.isfinite(s["loss"]) and 0 <= s["acc"] <= 1 for s in report["scores"].values())
    # each written aligned model keeps its input's function, and the merged weights are their average
    aligned = [load_model(tmp_path / "m" / "aligned" / f"model{i}")[0] for i in (1, 2, 3)]
    for i, model in enumerate(aligned):
        assert max_logit_change(load_model(root / f"s{i}")[0], model) <= 1e-4
    states = [dict(m.named_parameters()) for m in aligned]
    for key, value in merged.named_parameters():
        assert torch.allclose(value, sum(s[key] for s in states) / 3, atol=1e-6), key


def test_narrow_to_wide_where_exact(family, tmp_path):
    name, root = family
    args = ["align", root / "s0", root / "narrow", "--method", "weight", "--out", tmp_path / "w", "--no-progress"]
    if name in WIDENS:
        run_cli(*args)
        report = json.loads((tmp_path / "w" / "align.json").read_text())
        assert report["max_dlogits_b"] <= 1e-4
        wide = _auto_class(name).from_pretrained(tmp_path / "w")
        assert wide.config.hidden_size == load_model(root / "s0")[0].config.hidden_size
        return
    result = CliRunner().invoke(main, [str(a) for a in args])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code != 0 and len(lines) == 1 and lines[0].startswith("Error:"), result.output
    assert "wide" in lines[0] or "width" in lines[0], lines[0]
    assert not (tmp_path / "w").exists()


# a demo trains its own two models at the family's demo shape (a minute or two each on 2 cores), so the suite runs
# one decoder's and one encoder's; GLMC_EVERY_DEMO=1 runs every family's that declares one
DEMOS = [f for f in FAMILIES if adapter_named(f).training.demo_shape and (os.environ.get("GLMC_EVERY_DEMO") or
                                                                   f in ("neox", "bert"))]


@pytest.mark.parametrize("name", DEMOS)
def test_demo(name, tmp_path):
    run_cli("demo", "--family", name, "--out", tmp_path, "--steps", 3, "--methods", "none,weight", "--max-batches",
            1, "--no-progress")
    res = json.loads((tmp_path / "barriers.json").read_text())
    assert list(res["results"]) == ["none", "weight"] and res["demo"]["family"] == name
