"""Llama-family decoders end to end through the CLI, on models trained by `glmc train llama`: every method
(activation matching with key/value heads shared by several query heads included), the barrier, a 3-model
merge, narrow → wide, and the checkpoints written loading with AutoModelForCausalLM and generating."""

import json

import pytest
import torch

from conftest import run_cli
from glmc.matching.common import max_logit_change
from glmc.models import load_model

pytestmark = pytest.mark.slow

TINY_LLAMA = ["--layers", 2, "--heads", 4, "--kv-heads", 2, "--head-dim", 16, "--mlp", 96, "--context", 32,
              "--steps", 80, "--batch-size", 16, "--eval-every", 40, "--quiet"]


@pytest.fixture(scope="module")
def llamas(tmp_path_factory):
    """Three Llamas of width 64 (seeds 0-2) and one of width 32 with the same 4 × 16 heads (seed 3)."""
    root = tmp_path_factory.mktemp("llama-shakespeare")
    out = {}
    for name, seed, width in (("s0", 0, 64), ("s1", 1, 64), ("s2", 2, 64), ("narrow", 3, 32)):
        run_cli("train", "llama", "--seed", seed, "--width", width, "--out", root / name, *TINY_LLAMA)
        out[name] = root / name
    return out


def generates(path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path)
    out = model.generate(torch.zeros(1, 4, dtype=torch.long), max_new_tokens=5, do_sample=False)
    assert out.shape == (1, 9)


@pytest.mark.parametrize("method", ["activation", "weight", "learned"])
def test_every_method_aligns_grouped_query_llamas(llamas, method, tmp_path):
    out = run_cli("align", llamas["s0"], llamas["s1"], "--method", method, "--out", tmp_path / "al", "--steps", 20,
                  "--eval-every", 10, "--no-progress")
    report = json.loads((tmp_path / "al" / "align.json").read_text())
    assert report["max_dlogits_b"] <= 1e-4, out
    assert report["distance_after"] < report["distance_before"]
    if method == "weight":  # chosen among the candidates a grouped-query model can run: not the paper's
        names = [c["name"] for c in report["select"]["candidates"]]
        assert names and "paper" not in names and report["chosen"] in names
    b, _ = load_model(llamas["s1"])
    aligned, _ = load_model(tmp_path / "al")
    assert max_logit_change(b, aligned) <= 1e-4
    generates(tmp_path / "al")


@pytest.mark.parametrize("residual", ["orthogonal", "permutation"])
def test_activation_matching_residual_is_the_group_map_or_the_baseline_permutation(llamas, residual, tmp_path):
    run_cli("align", llamas["s0"], llamas["s1"], "--method", "activation", "--residual", residual, "--out",
            tmp_path / "al", "--no-progress")
    report = json.loads((tmp_path / "al" / "align.json").read_text())
    assert report["residual"] == residual and report["max_dlogits_b"] <= 1e-4
    found = report["transform"]["residual"]
    assert found == residual, found  # a dense orthogonal map, or the baseline's permutation


def test_the_papers_candidate_is_refused_for_grouped_query_heads_in_one_line(llamas, tmp_path):
    from click.testing import CliRunner

    from glmc.cli import main

    result = CliRunner().invoke(main, ["align", str(llamas["s0"]), str(llamas["s1"]), "--method", "weight",
                                       "--candidates", "glmc,paper", "--out", str(tmp_path / "al"), "--no-progress"])
    err = result.output.strip()
    assert result.exit_code == 1 and err.startswith("Error: ") and len(err.splitlines()) == 1, err
    assert "'paper' needs plain multi-head attention" in err
    assert not (tmp_path / "al").exists()


def test_barrier_of_a_llama_pair_drops_with_weight_matching(llamas, tmp_path):
    run_cli("barrier", llamas["s0"], llamas["s1"], "--align", "none,activation,weight", "--points", 5,
            "--max-batches", 4, "--json", tmp_path / "b.json", "--no-progress")
    res = json.loads((tmp_path / "b.json").read_text())["results"]
    assert res["weight"]["loss_barrier"] < res["none"]["loss_barrier"]


def test_three_llamas_merge_into_a_standard_checkpoint(llamas, tmp_path):
    out = run_cli("merge", llamas["s0"], llamas["s1"], llamas["s2"], "--out", tmp_path / "m", "--rounds", 2,
                  "--iterations", 3, "--max-batches", 2, "--no-progress")
    report = json.loads((tmp_path / "m" / "merge.json").read_text())
    assert max(report["max_dlogits"]) <= 1e-4, out
    generates(tmp_path / "m")


def test_narrow_llama_embedded_into_a_wide_one(llamas, tmp_path):
    narrow, _ = load_model(llamas["narrow"])
    out = run_cli("align", llamas["narrow"], llamas["s0"], "--out", tmp_path / "n2w", "--iterations", 3,
                  "--no-progress")
    assert "embedded" in out
    written, _ = load_model(tmp_path / "n2w")
    assert written.config.hidden_size == 64 and written.config.head_dim == 16
    assert max_logit_change(narrow, written) <= 1e-4  # embedded, aligned and filled: still the narrow model
    report = json.loads((tmp_path / "n2w" / "align.json").read_text())
    assert report["null_space"] == "fixed" and report["widened"]["embedding_max_dlogits"] <= 1e-4
    generates(tmp_path / "n2w")


def test_a_llama_with_other_heads_is_refused_in_one_line(llamas, tmp_path):
    run_cli("train", "llama", "--seed", 4, "--width", 64, "--out", tmp_path / "dh8", *TINY_LLAMA[:6],
            "--head-dim", 8, *TINY_LLAMA[8:])
    from click.testing import CliRunner

    from glmc.cli import main

    result = CliRunner().invoke(main, ["align", str(tmp_path / "dh8"), str(llamas["s0"]), "--out", str(tmp_path / "x")])
    err = result.output.strip()
    assert result.exit_code == 1 and err.startswith("Error: ") and "RoPE" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "x").exists()
