"""Qwen3, Gemma and OLMo end to end through the CLI, on models trained by `glmc train qwen3|gemma|olmo`: weight
matching, the barrier, and the aligned checkpoint loading with AutoModelForCausalLM with the input's logits and a
config that says what its weights are (a Gemma head untied by folding is untied in the config)."""

import json

import pytest

from conftest import run_cli
from glmc.matching.common import max_logit_change
from glmc.models import load_model

pytestmark = pytest.mark.slow

TINY = ["--layers", 1, "--width", 32, "--heads", 2, "--head-dim", 16, "--mlp", 64, "--context", 32, "--steps", 60,
        "--batch-size", 16, "--eval-every", 30, "--eval-batches", 2, "--quiet"]
FAMILIES = {"qwen3": ["--kv-heads", 1], "gemma": ["--kv-heads", 1, "--tied"], "olmo": ["--kv-heads", 2,
                                                                                         "--clip-qkv", "0.5"]}


@pytest.fixture(scope="module", params=list(FAMILIES))
def pair(request, tmp_path_factory):
    family = request.param
    root = tmp_path_factory.mktemp(family)
    for seed in (0, 1):
        run_cli("train", family, "--seed", seed, "--out", root / f"s{seed}", *TINY, *FAMILIES[family])
    return family, root


def test_weight_matching_writes_a_standard_checkpoint_with_the_inputs_logits(pair, tmp_path):
    from transformers import AutoModelForCausalLM

    family, root = pair
    out = run_cli("align", root / "s0", root / "s1", "--method", "weight", "--out", tmp_path / "al", "--no-progress")
    report = json.loads((tmp_path / "al" / "align.json").read_text())
    assert report["max_dlogits_b"] <= 1e-4, out
    assert report["distance_after"] < report["distance_before"]
    b, _ = load_model(root / "s1")
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "al").eval()
    assert type(hf) is type(b)
    assert max_logit_change(b, hf) <= 1e-4
    config = json.loads((tmp_path / "al" / "config.json").read_text())
    # folding the final norm's gain into the head unties it; the config says so (OLMo's norm has no gain)
    assert config["tie_word_embeddings"] is False
    assert hf.lm_head.weight.data_ptr() != hf.model.embed_tokens.weight.data_ptr()
    if family == "olmo":
        assert config["clip_qkv"] == 0.5


def test_barrier_drops_with_weight_matching(pair, tmp_path):
    _, root = pair
    run_cli("barrier", root / "s0", root / "s1", "--align", "none,weight", "--points", 5, "--max-batches", 4,
            "--json", tmp_path / "b.json", "--no-progress")
    res = json.loads((tmp_path / "b.json").read_text())["results"]
    assert res["weight"]["loss_barrier"] < res["none"]["loss_barrier"]
