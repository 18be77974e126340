"""Tiny end-to-end training runs: every family trains, saves, reloads with identical metrics; seeds matter."""

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import glmc.data as D
from conftest import text_corpus
from glmc.cli import main
from glmc.models import build_model, load_model
from glmc.models.evaluate import evaluate
from glmc.training.train import TrainConfig, data_shape, lr_factor, run, seed_everything, train_loop

TINY = text_corpus()
GPT2_SHAPE = dict(layers=1, width=32, heads=2, mlp=64)
VIT_SHAPE = dict(layers=1, width=32, heads=2, mlp=64, patch=4)
CFG = dict(steps=4, batch_size=8, eval_every=2, eval_batches=2, eval_batch_size=256, train_eval_batches=2)


def lm_spec():
    return {"source": f"text:{TINY}", "tokenizer": "char", "context": 32}


def reloaded_metrics(out: Path) -> dict:
    model, record = load_model(out)
    ds = D.load_for_model(out)
    bs = record["eval"]["batch_size"]
    return {s: evaluate(model, ds.batches(s, bs)) for s in ("val", "test")}, record


@pytest.mark.parametrize("family,spec,shape", [
    ("gpt2", None, GPT2_SHAPE),
    ("hf-vit", {"source": "digits"}, VIT_SHAPE),
    ("timm-vit", {"source": "digits"}, VIT_SHAPE),
])
def test_train_save_reload_reproduces_metrics(family, spec, shape, tmp_path):
    out = tmp_path / family
    _, record = run(family, spec or lm_spec(), shape, TrainConfig(seed=0, **CFG), out=out, progress=False,
                    log=lambda *a: None)
    again, saved = reloaded_metrics(out)
    assert saved == json.loads(json.dumps(record))
    for split in ("val", "test"):
        assert again[split] == record["metrics"][split]  # exactly, not approximately
    assert record["training"]["steps_done"] == 4 and record["training"]["best_step"] in (2, 4)
    assert set(record["timing"]) >= {"wall_seconds", "train_seconds"}
    if family == "gpt2":
        assert record["baseline"]["unigram_test_loss"] > 3 and (out / "tokenizer.json").is_file()


def test_same_seed_same_weights_other_seed_other_weights():
    ds = D.load(lm_spec())
    shape = dict(GPT2_SHAPE, dropout=0.1, **data_shape("gpt2", ds, GPT2_SHAPE))  # dropout: its RNG is seeded too

    def weights(seed):
        seed_everything(seed)
        model = build_model("gpt2", **shape)
        train_loop(model, ds, TrainConfig(seed=seed, **CFG), progress=False)
        return model.state_dict()

    a, b, c = weights(0), weights(0), weights(1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_lr_schedule_warms_up_then_decays_to_the_floor():
    cfg = TrainConfig(warmup=10, min_lr_ratio=0.1)
    f = [lr_factor(s, 100, cfg) for s in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert all(x >= y for x, y in zip(f[9:], f[10:])) and f[-1] == pytest.approx(0.1, abs=1e-3)


def test_cli_train_vit_timm_and_summary(tmp_path):
    out = tmp_path / "v"
    args = ["train", "vit", "--data", "digits", "--family", "timm", "--steps", "3", "--layers", "1", "--width",
            "32", "--heads", "2", "--mlp", "64", "--batch-size", "16", "--eval-every", "3", "--seed", "3",
            "--out", str(out), "--quiet"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "timm-vit seed 3: 3 steps" in result.output and "patch 4" in result.output
    assert (out / "timm_config.json").is_file()
    again = CliRunner().invoke(main, args)
    assert again.exit_code != 0 and "--overwrite" in again.output


def test_cli_train_vit_average_pooling_is_timm_only(tmp_path):
    args = ["train", "vit", "--data", "digits", "--steps", "2", "--layers", "1", "--width", "32", "--heads", "2",
            "--mlp", "64", "--batch-size", "16", "--pool", "avg", "--quiet"]
    refused = CliRunner().invoke(main, args + ["--out", str(tmp_path / "hf")])
    assert refused.exit_code != 0 and "--family timm" in refused.output and "Traceback" not in refused.output
    result = CliRunner().invoke(main, args + ["--family", "timm", "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    kwargs = json.loads((tmp_path / "t" / "timm_config.json").read_text())["kwargs"]
    assert kwargs["global_pool"] == "avg"


def test_minutes_budget_stops_on_time_and_keeps_the_best_weights():
    ds = D.load("digits")
    seed_everything(0)
    model = build_model("hf-vit", **VIT_SHAPE, **data_shape("hf-vit", ds, VIT_SHAPE))
    cfg = TrainConfig(minutes=0.03, batch_size=16, eval_every=10**6, eval_batch_size=256)
    loop = train_loop(model, ds, cfg, progress=False)
    assert loop.stopped == "time" and loop.steps_done >= 1
    assert loop.history[-1]["step"] == loop.steps_done == loop.best_step  # final weights validated at the end
