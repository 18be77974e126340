"""Checkpoints as people hold them: bfloat16 / float16, sharded, in the Hugging Face cache, as pytorch_model.bin;
written by transformers itself (save_pretrained) or torch.save, read through glmc's CLI and API."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import glmc
from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
KEEP = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "glmc.json")


def _record(ds, shape) -> dict:
    return {"glmc_version": "test", "kind": "trained-endpoint", "family": "gpt2", "model": shape, "data": ds.spec,
            "tokenizer": {"kind": ds.spec["tokenizer"], "vocab_size": ds.vocab_size}}


def _gpt2(path: Path, ds, seed: int, dtype=torch.float32, **save):
    """A random 1-layer GPT-2 over `ds`'s character vocabulary, written by save_pretrained in `dtype`, with the
    tokenizer and a glmc.json (so commands find their data)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=ds.vocab_size, n_positions=32, n_embd=32, n_layer=1, n_head=2, n_inner=64,
                     bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)
    model.to(dtype).save_pretrained(path, **save)
    ds.tokenizer.save_pretrained(path)
    shape = dict(layers=1, width=32, heads=2, mlp=64, vocab_size=ds.vocab_size, context=32)
    (path / "glmc.json").write_text(json.dumps(_record(ds, shape)) + "\n")
    return path


def _resave(src: Path, dst: Path, dtype=None, **save) -> Path:
    """`src` loaded by transformers and written again by save_pretrained (in `dtype`), with its other files."""
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(src)
    (model.to(dtype) if dtype is not None else model).save_pretrained(dst, **save)
    for name in KEEP:
        if (src / name).is_file():
            shutil.copy(src / name, dst / name)
    return dst


@pytest.fixture(scope="module")
def ds():
    return glmc.data.load("shakespeare", tokenizer="char", context=32)


@pytest.fixture(scope="module")
def f32(tmp_path_factory, ds):
    root = tmp_path_factory.mktemp("f32")
    return _gpt2(root / "a", ds, 0), _gpt2(root / "b", ds, 1)


def _barriers(a, b, tmp: Path, name: str, *extra) -> dict:
    out = tmp / f"{name}.json"
    run_cli("barrier", a, b, "--align", "none,weight", "--iterations", 2, "--max-batches", 2, "--batch-size", 8,
            "--no-progress", "--json", out, *extra)
    return {m: r["loss_barrier"] for m, r in json.loads(out.read_text())["results"].items()}


# ------------------------------------------------------------------------------------------------ precision

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_half_precision_pair_aligns_in_float32_and_is_written_in_its_own_dtype(f32, tmp_path, dtype):
    from transformers import GPT2LMHeadModel

    half = [_resave(p, tmp_path / f"half-{p.name}", dtype) for p in f32]
    exact = [_resave(p, tmp_path / f"exact-{p.name}", torch.float32) for p in half]  # float32 copies of the halves
    out = run_cli("align", *half, "--out", tmp_path / "al", "--iterations", 2, "--no-progress")
    report = json.loads((tmp_path / "al" / "align.json").read_text())
    assert report["max_dlogits_b"] <= 1e-4 and report["dtypes"]["compute"] == "float32"
    assert report["rounding"]["dtype"] == str(dtype).removeprefix("torch.") and report["rounding"]["max_dlogits"] > 0
    assert "rounding the weights changes the logits" in out
    written = GPT2LMHeadModel.from_pretrained(tmp_path / "al")
    assert all(p.dtype == dtype for p in written.parameters())
    assert _barriers(*half, tmp_path, "half") == _barriers(*exact, tmp_path, "exact")  # upcasting is exact
    original = _barriers(*f32, tmp_path, "f32")
    assert all(abs(v - original[k]) < 0.05 for k, v in _barriers(*half, tmp_path, "half2").items())
    run_cli("verify", half[0])


def test_a_pair_of_different_dtypes_merges_in_model_as_dtype(f32, tmp_path):
    from transformers import GPT2LMHeadModel

    a = _resave(f32[0], tmp_path / "a16", torch.bfloat16)
    b = _resave(f32[1], tmp_path / "b16", torch.float16)
    run_cli("merge", a, b, "--out", tmp_path / "m", "--iterations", 1, "--rounds", 1, "--max-batches", 1,
            "--no-progress")
    report = json.loads((tmp_path / "m" / "merge.json").read_text())
    assert report["dtypes"] == {"compute": "float32", "inputs": ["bfloat16", "float16"], "written": "bfloat16"}
    assert max(report["max_dlogits"]) <= 1e-4
    dtypes = {d: next(GPT2LMHeadModel.from_pretrained(tmp_path / "m" / d).parameters()).dtype
              for d in (".", "aligned/model1", "aligned/model2")}
    assert dtypes == {".": torch.bfloat16, "aligned/model1": torch.bfloat16, "aligned/model2": torch.float16}
    run_cli("merge", a, b, "--out", tmp_path / "m32", "--iterations", 1, "--rounds", 1, "--no-eval", "--dtype",
            "float32", "--no-progress")
    assert next(GPT2LMHeadModel.from_pretrained(tmp_path / "m32").parameters()).dtype == torch.float32


def test_api_precision_options(f32, tmp_path):
    a16 = glmc.load_model(_resave(f32[0], tmp_path / "a16", torch.bfloat16))
    b16 = glmc.load_model(_resave(f32[1], tmp_path / "b16", torch.bfloat16))
    al = glmc.align(a16, b16, iterations=1, progress=False, compute_dtype="float64", dtype="float32")
    assert next(al.model_b.parameters()).dtype == torch.float64 and al.report["max_dlogits_b"] <= 1e-4
    assert al.dtype == "float32" and next(a16.parameters()).dtype == torch.bfloat16  # inputs untouched
    al.save(tmp_path / "out")
    from safetensors import safe_open

    with safe_open(str(tmp_path / "out" / "model.safetensors"), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F32"}
    with pytest.raises(ValueError, match="unknown compute_dtype 'bfloat16'"):
        glmc.align(a16, b16, compute_dtype="bfloat16")
