"""Barriers and weight matching on GPT-2s trained by `glmc train` (tiny budgets), through the real CLI."""

import hashlib
import json

import pytest
import torch

from conftest import run_cli
from glmc.adapters import adapter_for
from glmc.matching import align
from glmc.models import load_model, save_model
from glmc.paths.barrier import barrier_metrics, path_curve
from glmc.symmetry.random import random_full_transform
from glmc.view.model_ops import logits, transform_model


def _digest(directory):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def permuted_copy(gpt2_pair, tmp_path_factory):
    """Model A moved by a random element of every class (a functionally identical, far-away copy)."""
    a, record = load_model(gpt2_pair[0])
    t = random_full_transform(adapter_for(a).arch(a), torch.Generator().manual_seed(11))
    out = tmp_path_factory.mktemp("moved") / "pi_a"
    from transformers import AutoTokenizer

    save_model(transform_model(a, t), out, record=record, tokenizer=AutoTokenizer.from_pretrained(gpt2_pair[0]))
    return out, t


def test_barrier_of_a_model_with_itself_is_exactly_zero(gpt2_pair, tmp_path):
    a = gpt2_pair[0]
    run_cli("barrier", a, a, "--points", 5, "--max-batches", 2, "--json", tmp_path / "b.json", "--no-progress")
    r = json.loads((tmp_path / "b.json").read_text())["results"]["none"]
    assert r["loss_barrier"] == 0.0 and r["loss_barrier_mean"] == 0.0 and r["acc_drop"] == 0.0
    assert len(set(r["loss"])) == 1


def test_symmetric_copy_has_a_barrier_that_alignment_removes(gpt2_pair, permuted_copy, tmp_path):
    moved_dir, t = permuted_copy
    out = run_cli("barrier", gpt2_pair[0], moved_dir, "--align", "none,weight", "--points", 5, "--max-batches", 2,
                  "--json", tmp_path / "b.json", "--csv", tmp_path / "b.csv", "--plot", tmp_path / "b.png",
                  "--no-progress")
    res = json.loads((tmp_path / "b.json").read_text())
    assert res["schema"] == "glmc.barrier/1" and res["points"] == 5
    none, weight = res["results"]["none"], res["results"]["weight"]
    assert none["loss_barrier"] > 0.3, out  # averaging a model with its symmetric copy breaks it
    assert weight["loss_barrier"] <= 1e-4, out  # weight matching recovers the symmetry
    assert weight["alignment"]["max_dlogits_b"] <= 1e-4
    assert (tmp_path / "b.png").stat().st_size > 10_000
    assert len((tmp_path / "b.csv").read_text().splitlines()) == 1 + 2 * 5
    # and the exact inverse transform also gives a zero barrier
    a, _ = load_model(gpt2_pair[0])
    moved, _ = load_model(moved_dir)
    back = transform_model(moved, t.inverse(adapter_for(a).arch(a)), canonicalise_first=False)
    x = torch.randint(0, a.config.vocab_size, (4, 33), generator=torch.Generator().manual_seed(0))
    batches = [{"input_ids": x[:, :-1], "targets": x[:, 1:]}]
    from glmc.view.model_ops import canonical_model

    curve = path_curve([canonical_model(a), back], batches, "lm", 5, progress=False)
    assert barrier_metrics(curve)["loss_barrier"] <= 1e-4


def test_weight_matching_lowers_the_barrier_of_independent_models(gpt2_pair):
    a, _ = load_model(gpt2_pair[0])
    b, _ = load_model(gpt2_pair[1])
    import glmc.data

    ds = glmc.data.load_for_model(gpt2_pair[0])
    batches = list(ds.batches("val", 32, max_batches=3, shuffle=False))
    vanilla = barrier_metrics(path_curve([a, b], batches, "lm", 5, progress=False))["loss_barrier"]
    al = align(a, b, "weight", progress=False)
    matched = barrier_metrics(path_curve([al.model_a, al.model_b], batches, "lm", 5, progress=False))["loss_barrier"]
    assert al.report["distance_after"] < al.report["distance_before"]
    assert matched < vanilla


def test_align_cli_writes_a_checked_standard_checkpoint(gpt2_pair, tmp_path):
    from transformers import GPT2LMHeadModel

    before = [_digest(p) for p in gpt2_pair]
    out = run_cli("align", *gpt2_pair, "--method", "weight", "--out", tmp_path / "b_aligned", "--iterations", 3,
                  "--no-progress")
    assert "max |Δlogits|" in out
    assert [_digest(p) for p in gpt2_pair] == before  # inputs untouched
    aligned = GPT2LMHeadModel.from_pretrained(tmp_path / "b_aligned").eval()
    b, _ = load_model(gpt2_pair[1])
    x = torch.randint(0, b.config.vocab_size, (2, 40))
    assert float((logits(b, x) - logits(aligned, x)).abs().max()) <= 1e-4
    report = json.loads((tmp_path / "b_aligned" / "align.json").read_text())
    assert report["method"] == "weight" and report["distance_after"] < report["distance_before"]
    assert (tmp_path / "b_aligned" / "transform.safetensors").is_file()
    # outputs are readable by others, like any file the user writes (temp files are created private)
    assert (tmp_path / "b_aligned").stat().st_mode & 0o055
    assert (tmp_path / "b_aligned" / "align.json").stat().st_mode & 0o044
    assert (tmp_path / "b_aligned" / "glmc.json").is_file()
