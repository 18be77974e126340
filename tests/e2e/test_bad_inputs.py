"""Bad inputs through the real `glmc` CLI: each is refused with one line naming the problem (no traceback), a
non-zero exit code, the inputs left byte-identical and nothing (half-)written at the output path.

The models are tiny random checkpoints written with `save_pretrained(..., safe_serialization=True)` (no
training); those that need data carry a glmc.json like the one `glmc train` writes (data spec + tokenizer).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from glmc.cli import main

GLMC = Path(sys.executable).with_name("glmc")


# ------------------------------------------------------------------------------------------------ models

def _record(ds, family, shape) -> dict:
    """The parts of `glmc train`'s glmc.json (glmc/training/train.py record_for) that later commands read."""
    return {"glmc_version": "test", "kind": "trained-endpoint", "family": family, "model": shape, "data": ds.spec,
            "tokenizer": {"kind": ds.spec["tokenizer"], "vocab_size": ds.vocab_size}}


def _gpt2(root: Path, name: str, ds, *, layers=1, width=32, heads=2, vocab=None, positions=32, seed=0,
          record=True, **config):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    vocab = vocab or ds.vocab_size
    cfg = GPT2Config(vocab_size=vocab, n_positions=positions, n_embd=width, n_layer=layers, n_head=heads,
                     n_inner=2 * width, bos_token_id=0, eos_token_id=0, **config)
    path = root / name
    GPT2LMHeadModel(cfg).eval().save_pretrained(path, safe_serialization=True)
    if record:
        ds.tokenizer.save_pretrained(path)
        shape = dict(layers=layers, width=width, heads=heads, mlp=2 * width, vocab_size=vocab, context=positions)
        (path / "glmc.json").write_text(json.dumps(_record(ds, "gpt2", shape), indent=2) + "\n")
    return path


def _vit(root: Path, name: str, *, seed=0, bias=True):
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(seed)
    cfg = ViTConfig(image_size=8, patch_size=4, num_channels=1, num_labels=10, hidden_size=16, num_hidden_layers=1,
                    num_attention_heads=2, intermediate_size=32, qkv_bias=bias, layer_norm_eps=1e-6)
    path = root / name
    ViTForImageClassification(cfg).eval().save_pretrained(path, safe_serialization=True)
    return path


def _variant(root: Path, name: str, source: Path, edit=None) -> Path:
    """A copy of `source` whose model.safetensors tensors are passed through `edit` (a dict -> dict function)."""
    from safetensors.torch import load_file, save_file

    path = root / name
    shutil.copytree(source, path)
    if edit is not None:
        weights = path / "model.safetensors"
        save_file(edit(load_file(weights)), weights, metadata={"format": "pt"})
    return path


def _set_entry(key, value):
    def edit(sd):
        sd[key] = sd[key].clone()
        sd[key].view(-1)[0] = value
        return sd
    return edit


C_FC = "transformer.h.0.mlp.c_fc.weight"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> path of every input checkpoint (all under one root, hashed around each test)."""
    import glmc.data

    root = tmp_path_factory.mktemp("bad-input-models")
    ds = glmc.data.load("shakespeare", tokenizer="char", context=32)
    m = {"a": _gpt2(root, "a", ds), "b": _gpt2(root, "b", ds, seed=1), "c": _gpt2(root, "c", ds, seed=2),
         "deep": _gpt2(root, "deep", ds, layers=2), "vocab": _gpt2(root, "vocab", ds, vocab=97),
         "heads": _gpt2(root, "heads", ds, heads=4), "ctx": _gpt2(root, "ctx", ds, positions=64),
         "small_vocab": _gpt2(root, "small_vocab", ds, vocab=40),
         "cross": _gpt2(root, "cross", ds, add_cross_attention=True),
         "no_record": _gpt2(root, "no_record", ds, seed=3, record=False),
         "va": _vit(root, "va"), "vb": _vit(root, "vb", seed=1),
         "nobias_a": _vit(root, "nobias_a", bias=False), "nobias_b": _vit(root, "nobias_b", seed=1, bias=False)}
    a = m["a"]
    m["empty"] = root / "empty"
    m["empty"].mkdir()
    m["truncated"] = _variant(root, "truncated", a)
    weights = m["truncated"] / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    m["garbage"] = _variant(root, "garbage", a)
    (m["garbage"] / "model.safetensors").write_bytes(b"\xff" * 64)
    m["pickle"] = root / "pickle"
    m["pickle"].mkdir()
    shutil.copy(a / "config.json", m["pickle"])
    (m["pickle"] / "pytorch_model.bin").write_bytes(b"\x80\x04 never unpickled")
    m["falcon"] = root / "falcon"
    m["falcon"].mkdir()
    (m["falcon"] / "config.json").write_text(json.dumps({"model_type": "falcon", "hidden_size": 32}))
    shutil.copy(a / "model.safetensors", m["falcon"])
    m["no_type"] = _variant(root, "no_type", a)
    cfg = json.loads((a / "config.json").read_text())
    (m["no_type"] / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k != "model_type"}))
    m["bad_heads"] = _variant(root, "bad_heads", a)
    (m["bad_heads"] / "config.json").write_text(json.dumps({**cfg, "n_head": 3}))
    m["bad_config"] = _variant(root, "bad_config", a)
    (m["bad_config"] / "config.json").write_text('{"model_type": "gpt2", ')
    m["config_list"] = _variant(root, "config_list", a)
    (m["config_list"] / "config.json").write_text(json.dumps([cfg]))
    m["config_type"] = _variant(root, "config_type", a)
    (m["config_type"] / "config.json").write_text(json.dumps({**cfg, "n_layer": "two"}))
    m["bad_record"] = _variant(root, "bad_record", a)
    (m["bad_record"] / "glmc.json").write_text("{not json")
    m["no_config"] = root / "no_config"
    m["no_config"].mkdir()
    shutil.copy(a / "model.safetensors", m["no_config"])
    m["int"] = _variant(root, "int", a, lambda sd: {**sd, C_FC: (sd[C_FC] * 100).to(torch.int64)})
    m["shape"] = _variant(root, "shape", a, lambda sd: {**sd, C_FC: sd[C_FC][:, :16].contiguous()})
    m["missing"] = _variant(root, "missing", a, lambda sd: {k: v for k, v in sd.items() if k != C_FC})
    m["nan"] = _variant(root, "nan", a, _set_entry(C_FC, float("nan")))
    m["inf"] = _variant(root, "inf", a, _set_entry("transformer.wte.weight", float("inf")))
    m["file"] = root / "a-regular-file"
    m["file"].write_text("not a directory\n")
    _release_formats(root, m)
    return m


class _Code:
    """Pickles as a call to os.system: what torch.load(weights_only=True) must refuse without running it."""

    def __reduce__(self):
        return (os.system, ("touch /tmp/glmc-was-unpickled",))


def _release_formats(root: Path, m: dict) -> None:
    """Shards, pickle-based weights and a Hugging Face cache, each broken in one way."""
    from transformers import GPT2LMHeadModel

    from conftest import make_cache

    model = GPT2LMHeadModel.from_pretrained(m["a"])
    model.save_pretrained(root / "shard_missing", max_shard_size="20KB")
    sorted((root / "shard_missing").glob("model-*.safetensors"))[1].unlink()
    m["shard_missing"] = root / "shard_missing"
    m["no_index"] = _variant(root, "no_index", m["shard_missing"])
    (m["no_index"] / "model.safetensors.index.json").unlink()
    for name, state in (("evil", {"w": torch.zeros(2), "x": _Code()}), ("bin_truncated", model.state_dict()),
                        ("bin_list", [torch.zeros(2)])):
        m[name] = root / name
        m[name].mkdir()
        shutil.copy(m["a"] / "config.json", m[name])
        torch.save(state, m[name] / "pytorch_model.bin")
    data = (m["bin_truncated"] / "pytorch_model.bin").read_bytes()
    (m["bin_truncated"] / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    m["pt_only"] = root / "pt_only"
    m["pt_only"].mkdir()
    shutil.copy(m["a"] / "config.json", m["pt_only"])
    torch.save(model.state_dict(), m["pt_only"] / "model.pt")
    m["tok_other"] = _variant(root, "tok_other", m["b"])  # same vocabulary size, two tokens' ids swapped
    tok = json.loads((m["tok_other"] / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    first, second = sorted(vocab)[1:3]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (m["tok_other"] / "tokenizer.json").write_text(json.dumps(tok))
    m["hub"] = make_cache(root / "hub", "someone/tiny", {"main": m["a"]})
    (root / "docs.jsonl").write_text('{"body": "To be, or not to be"}\n{"text": "that is the question"}\n')
    (root / "broken.jsonl").write_text('{"text": "a line"}\nnot json\n')
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["a", "b"]}), root / "docs.parquet")
    (root / "empty-folder").mkdir()
    m["snap"] = next((m["hub"] / "models--someone--tiny" / "snapshots").iterdir())
    m["blobs"] = m["hub"] / "models--someone--tiny" / "blobs"


def _snapshot(*roots) -> dict:
    """{path: sha256} of every file (and the set of directories) below `roots`, hidden entries included."""
    out = {}
    for root in roots:
        for dirpath, _dirs, files in os.walk(root):
            out[dirpath] = "dir"
            for f in files:
                p = os.path.join(dirpath, f)
                out[p] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
    return out


def _invoke(args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def _error_lines(output: str) -> list[str]:
    """The output less click's usage lines ("Usage: …", "Try 'glmc … --help' for help.") and blank lines."""
    return [line for line in output.splitlines()
            if line.strip() and not line.startswith(("Usage: ", "Try '"))]


# ------------------------------------------------------------------------------------------------ the table

USAGE, ERROR = 2, 1  # click's usage errors; glmc's one-line errors
A_B = ("{a}", "{b}")
FAST_ALIGN = ("--iterations", "1", "--no-head-maps", "--no-progress")
XFAIL = {}  # row id -> reason, for inputs that still reach a crash inside an algorithm (none left)

ROWS = [
    # --- checkpoints -------------------------------------------------------------------------------------
    ("empty-dir", ["verify", "{empty}"], ERROR, "is empty: expected a model directory"),
    ("truncated-safetensors", ["verify", "{truncated}"], ERROR, "is truncated or corrupt"),
    ("garbage-safetensors", ["align", "{garbage}", "{b}", "--out", "{out}"], ERROR, "is truncated or corrupt"),
    ("pickle-not-a-state-dict", ["verify", "{pickle}"], ERROR,
     "torch.load(weights_only=True), which rebuilds only tensors, refuses it (Unsupported operand"),
    ("pickle-with-code", ["verify", "{evil}"], ERROR, "refuses it (Trying to load unsupported GLOBAL posix.system"),
    ("pickle-truncated", ["align", "{bin_truncated}", "{b}", "--out", "{out}"], ERROR, "is truncated or corrupt"),
    ("pickle-holds-a-list", ["verify", "{bin_list}"], ERROR, "does not hold a state dict (name -> tensor) but a list"),
    ("other-pickle-only", ["verify", "{pt_only}"], ERROR, "(model.pt) and no pytorch_model.bin: glmc reads no other"),
    ("shard-missing", ["verify", "{shard_missing}"], ERROR, "names shard model-00002-of-"),
    ("shards-without-index", ["verify", "{no_index}"], ERROR, "but no model.safetensors.index.json"),
    ("convert-refused-pickle", ["convert", "{evil}", "{out}"], ERROR, "refuses it (Trying to load unsupported"),
    ("convert-out-is-input", ["convert", "{a}", "{a}", "--overwrite"], USAGE, "is the input"),
    ("hub-id-not-cached", ["verify", "someone/absent"], ERROR,
     "is neither a directory nor a model in the local Hugging Face cache"),
    ("revision-not-cached", ["barrier", "someone/tiny", "{b}", "--revision", "step9"], ERROR,
     "cached: main); download it first: hf download someone/tiny --revision step9"),
    ("revision-for-a-directory", ["verify", "{a}", "--revision", "main"], ERROR, "--revision applies to hub ids"),
    ("out-is-a-cached-snapshot", ["align", "{b}", "someone/tiny", "--out", "{snap}", "--overwrite"], USAGE,
     "is the input"),
    ("out-holds-the-cache-blobs", ["merge", "someone/tiny", "{b}", "--out", "{blobs}", "--overwrite"], USAGE,
     "contains the input"),
    ("falcon-config", ["verify", "{falcon}"], ERROR, "model_type 'falcon'; glmc supports GPT-2"),
    ("config-without-model-type", ["barrier", "{no_type}", "{b}"], ERROR, "has no model_type; glmc supports"),
    ("config-invalid-json", ["verify", "{bad_config}"], ERROR, "config.json is not valid JSON"),
    ("config-heads-do-not-divide-width", ["verify", "{bad_heads}"], ERROR, "does not describe a valid GPT-2 model"),
    ("config-a-json-list", ["verify", "{config_list}"], ERROR, "holds a JSON list, not an object"),
    ("config-a-json-list-inspect", ["inspect", "{config_list}"], ERROR, "holds a JSON list, not an object"),
    ("config-field-of-wrong-type", ["verify", "{config_type}"], ERROR,
     "does not describe a valid GPT-2 model: Validation error for field 'n_layer': TypeError: Field 'n_layer' "
     "expected int, got str"),
    ("config-field-of-wrong-type-align", ["align", "{config_type}", "{b}", "--out", "{out}"], ERROR,
     "Field 'n_layer' expected int"),
    ("glmc-json-invalid", ["align", "{a}", "{bad_record}", "--out", "{out}"], ERROR, "glmc.json is not valid JSON"),
    ("no-config", ["verify", "{no_config}"], ERROR, "holds no model (files: model.safetensors)"),
    ("int64-weights", ["verify", "{int}"], ERROR, f"weight '{C_FC}' is stored as I64; glmc needs floating-point"),
    ("weight-shape-vs-config", ["verify", "{shape}"], ERROR, f"weight '{C_FC}' has shape [32, 16] but config.json"),
    ("missing-weight", ["verify", "{missing}"], ERROR, f"lacks weight '{C_FC}' that config.json implies"),
    ("nan-weights", ["align", "{a}", "{nan}", "--out", "{out}"], ERROR, f"weight '{C_FC}' holds NaN values"),
    ("inf-weights", ["verify", "{inf}"], ERROR, "weight 'transformer.wte.weight' holds infinite values"),
    ("model-path-is-a-file", ["verify", "{file}"], USAGE, "is a file"),
    ("model-path-missing", ["align", "{a}", "{root}/nope", "--out", "{out}"], USAGE, "does not exist"),
    ("cross-attention-verify", ["verify", "{cross}"], ERROR, "cannot transform"),
    ("cross-attention-align", ["align", "{cross}", "{cross}", "--out", "{out}"], ERROR,
     "GPT-2 with cross-attention (add_cross_attention=True)"),
    # --- pairs and groups --------------------------------------------------------------------------------
    ("depth-mismatch", ["align", "{a}", "{deep}", "--out", "{out}"], ERROR, "models differ in depth"),
    ("depth-mismatch-merge", ["merge", "{a}", "{b}", "{deep}", "--out", "{out}"], ERROR, "models differ in depth"),
    ("vocab-mismatch", ["barrier", "{a}", "{vocab}"], ERROR, "models differ in vocabulary size"),
    ("context-mismatch", ["align", "{a}", "{ctx}", "--out", "{out}"], ERROR, "models differ in positions"),
    ("heads-mismatch", ["align", "{a}", "{heads}", "--out", "{out}", *FAST_ALIGN[:2]], ERROR,
     "one model must be at most as wide as the other"),
    ("task-mismatch", ["align", "{a}", "{va}", "--out", "{out}"], ERROR,
     "cannot combine a gpt2 model"),
    ("task-mismatch-barrier", ["barrier", "{va}", "{a}"], ERROR, "cannot combine a hf-vit model"),
    ("tokenizer-mismatch", ["barrier", "{a}", "{tok_other}"], ERROR, "models differ in tokenizer"),
    ("tokenizer-mismatch-merge", ["merge", *A_B, "{tok_other}", "--out", "{out}"], ERROR, "models differ in tokenizer"),
    ("inspect-missing", ["inspect", "{a}", "{root}/nope"], USAGE, "does not exist"),
    ("inspect-truncated", ["inspect", "{truncated}"], ERROR, "is truncated or corrupt"),
    # --- data --------------------------------------------------------------------------------------------
    ("no-glmc-json-needs-data", ["align", "{no_record}", "{a}", "--method", "activation", "--out", "{out}"],
     ERROR, "has no glmc.json; give the data explicitly"),
    ("unknown-data-source", ["barrier", *A_B, "--data", "nosuch"], ERROR, "unknown data source 'nosuch'"),
    ("text-data-for-vit", ["barrier", "{va}", "{vb}", "--data", "shakespeare"], ERROR,
     "is a hf-vit model for images (a classifier), but the data 'shakespeare' is text"),
    ("jsonl-missing-field", ["barrier", *A_B, "--data", "jsonl:{root}/docs.jsonl:body"], ERROR,
     "docs.jsonl line 2 has no field 'body' (fields: text)"),
    ("jsonl-not-json", ["barrier", *A_B, "--data", "jsonl:{root}/broken.jsonl"], ERROR,
     "broken.jsonl line 2 is not JSON"),
    ("jsonl-missing-file", ["barrier", *A_B, "--data", "jsonl:{root}/nope.jsonl"], ERROR, "data file not found"),
    ("parquet-missing-column", ["merge", *A_B, "--out", "{out}", "--data", "parquet:{root}/docs.parquet:body"], ERROR,
     "docs.parquet has no column 'body' (columns: text)"),
    ("parquet-folder-without-splits", ["barrier", *A_B, "--data", "parquet:{root}/empty-folder"], ERROR,
     "holds no .parquet file named train, validation or test"),
    ("hf-disk-not-saved", ["barrier", *A_B, "--data", "hf-disk:{root}/empty-folder"], ERROR,
     "is not a folder written by save_to_disk"),
    ("hf-dataset-not-cached", ["barrier", *A_B, "--data", "hf:someone/absent-data"], ERROR,
     "data set someone/absent-data is not in the local datasets cache"),
    ("image-table-without-label", ["barrier", "{va}", "{vb}", "--data", "parquet:{root}/docs.parquet:image=text"],
     ERROR, "an image set needs its label column too"),
    ("image-table-bad-column-spec", ["barrier", "{va}", "{vb}", "--data", "parquet:{root}/docs.parquet:pixels=x"],
     ERROR, "column names are image=COL,label=COL"),
    ("text-table-for-vit", ["barrier", "{va}", "{vb}", "--data", "jsonl:{root}/docs.jsonl"], ERROR,
     "but the data 'jsonl:"),
    ("tokenizer-larger-than-vocab", ["barrier", "{small_vocab}", "{small_vocab}"], ERROR,
     "has 85 tokens but"),
    # --- option values -----------------------------------------------------------------------------------
    ("iterations-0", ["align", *A_B, "--out", "{out}", "--iterations", "0"], USAGE, "'--iterations': 0 is not in"),
    ("points-1", ["barrier", *A_B, "--points", "1"], USAGE, "'--points': 1 is not in the range x>=2"),
    ("steps-0", ["merge", *A_B, "--out", "{out}", "--steps", "0"], USAGE, "'--steps': 0 is not in"),
    ("batch-size-0", ["barrier", *A_B, "--batch-size", "0"], USAGE, "'--batch-size': 0 is not in"),
    ("lr-negative", ["align", *A_B, "--out", "{out}", "--lr", "-1"], USAGE, "'--lr': -1.0 is not in"),
    ("weights-do-not-sum-to-1", ["merge", *A_B, "--out", "{out}", "--weights", "1,2"], USAGE,
     "weights must sum to 1, got '1,2'"),
    ("weights-not-numbers", ["merge", *A_B, "--out", "{out}", "--weights", "x,y"], USAGE,
     "'x,y' is not a comma-separated list of numbers"),
    ("weights-count", ["merge", *A_B, "{c}", "--out", "{out}", "--weights", "0.5,0.5"], USAGE,
     "2 weights for 3 models"),
    ("tol-0", ["verify", "{a}", "--tol", "0"], USAGE, "'--tol': 0.0 is not in the range x>0"),
    ("unknown-class", ["verify", "{a}", "--classes", "nosuch"], USAGE, "unknown symmetry class 'nosuch'"),
    ("unknown-align-method", ["barrier", *A_B, "--align", "none,nosuch"], USAGE, "unknown method 'nosuch'"),
    ("non-simplex-method", ["barrier", *A_B, "{c}", "--align", "activation"], USAGE,
     "simplex barriers (3+ models) support"),
    ("unknown-method-choice", ["align", *A_B, "--out", "{out}", "--method", "nosuch"], USAGE,
     "'nosuch' is not one of"),
    ("one-model-barrier", ["barrier", "{a}"], USAGE, "give at least two models"),
    ("restarts-in-paper-circuit-mode", ["align", *A_B, "--out", "{out}", "--mode", "circuit", "--restarts", "2"],
     ERROR, "the paper's weight matching runs from one first map"),
    ("weights-negative", ["merge", *A_B, "--out", "{out}", "--weights=-0.5,1.5"], USAGE,
     "weights must be non-negative numbers"),
    ("device-nonsense", ["align", *A_B, "--out", "{out}", "--device", "toaster"], USAGE, "'toaster' is not a device"),
    ("train-steps-0", ["train", "gpt2", "--steps", "0", "--out", "{out}"], USAGE, "'--steps': 0 is not in"),
    ("train-layers-0", ["train", "vit", "--layers", "0", "--out", "{out}"], USAGE, "'--layers': 0 is not in"),
    # a patch is fitted to the image size before the model is built: text given to a ViT was an internal error
    ("train-vit-on-text", ["train", "vit", "--data", "shakespeare", "--out", "{out}"], ERROR,
     "a ViT needs image data, got shakespeare"),
    ("plot-format", ["barrier", *A_B, "--plot", "{out}.foo"], USAGE, "cannot draw a .foo figure"),
    ("compute-dtype-bfloat16", ["align", *A_B, "--out", "{out}", "--compute-dtype", "bfloat16"], USAGE,
     "'bfloat16' is not one of 'float32', 'float64'"),
    ("write-dtype-int8", ["merge", *A_B, "--out", "{out}", "--dtype", "int8"], USAGE, "'int8' is not one of"),
    ("max-shard-size-nonsense", ["align", *A_B, "--out", "{out}", "--max-shard-size", "lots"], USAGE,
     "'lots' is not a size"),
    # --- outputs -----------------------------------------------------------------------------------------
    ("out-under-a-file", ["align", *A_B, "--out", "{file}/sub"], USAGE, "is a file, not a directory"),
    ("merge-out-under-a-file", ["merge", *A_B, "--out", "{file}/sub/dir"], USAGE, "is a file, not a directory"),
    ("json-under-a-file", ["barrier", *A_B, "--json", "{file}/b.json"], USAGE, "is a file, not a directory"),
    ("train-out-under-a-file", ["train", "gpt2", "--steps", "1", "--quiet", "--out", "{file}/sub"], USAGE,
     "is a file, not a directory"),
    ("out-exists", ["align", *A_B, "--out", "{existing}"], USAGE, "exists (pass --overwrite to replace it"),
    ("merge-out-exists", ["merge", *A_B, "--out", "{existing}"], USAGE, "exists (pass --overwrite"),
    ("out-is-a-file", ["align", *A_B, "--out", "{file}", "--overwrite"], USAGE, "a-file' is a file"),
    ("json-is-a-directory", ["barrier", *A_B, "--json", "{existing}"], USAGE, "existing' is a directory"),
    ("out-is-input-b", ["align", *A_B, "--out", "{b}", "--overwrite"], USAGE, "is the input"),
    ("out-is-a-link-to-input-b", ["align", *A_B, "--out", "{link}", "--overwrite"], USAGE, "is the input"),
    ("out-inside-input-a", ["align", *A_B, "--out", "{a}/aligned", "--overwrite"], USAGE, "lies inside the input"),
    ("merge-out-contains-inputs", ["merge", *A_B, "--out", "{root}", "--overwrite"], USAGE, "contains the input"),
    ("json-inside-input", ["barrier", *A_B, "--json", "{a}/b.json"], USAGE, "lies inside the input"),
]


def _row(id_, args, code, phrase):
    marks = [pytest.mark.xfail(strict=True, reason=XFAIL[id_])] if id_ in XFAIL else []
    return pytest.param(args, code, phrase, id=id_, marks=marks)


@pytest.mark.parametrize("args,code,phrase", [_row(*r) for r in ROWS])
def test_bad_input_is_one_line_and_touches_nothing(models, tmp_path, monkeypatch, args, code, phrase):
    monkeypatch.delenv("GLMC_DEBUG", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(models["hub"]))
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("an earlier result\n")
    file = tmp_path / "a-file"
    file.write_text("a regular file\n")
    link = tmp_path / "link-to-b"
    link.symlink_to(models["b"], target_is_directory=True)
    paths = {**{k: str(v) for k, v in models.items()}, "root": str(models["a"].parent), "out": str(tmp_path / "out"),
             "existing": str(existing), "file": str(file), "link": str(link)}
    before = _snapshot(models["a"].parent, tmp_path)
    result = _invoke([a.format(**paths) for a in args])
    after = _snapshot(models["a"].parent, tmp_path)
    assert isinstance(result.exception, SystemExit), result.exception  # a handled error, not a crash
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = _error_lines(result.output)
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert phrase in lines[0], result.output
    assert before == after  # inputs byte-identical; nothing written or left half-written at --out / --json
    assert not Path("/tmp/glmc-was-unpickled").exists()  # a refused pickle never ran its code


# ------------------------------------------------------------------------------------------------ writes

class Interrupt:
    """Fault injection: the first Path.write_text below `under` writes half its text, then raises `error`."""

    def __init__(self, monkeypatch, under: Path, error):
        self.under, self.error, self.hits = str(under), error, []
        original = Path.write_text

        def write_text(path, data, *args, **kwargs):
            if str(path).startswith(self.under) and not self.hits:
                self.hits.append(path)
                original(path, data[: len(data) // 2], *args, **kwargs)
                raise self.error(path)
            return original(path, data, *args, **kwargs)

        monkeypatch.setattr(Path, "write_text", write_text)


def _disk_full(path):
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def _keyboard(path):
    return KeyboardInterrupt()


@pytest.mark.parametrize("error,code,phrase", [(_disk_full, 1, "No space left on device (free some space"),
                                               (_keyboard, 1, "Aborted!")], ids=["disk-full", "ctrl-c"])
@pytest.mark.parametrize("overwrite", [False, True], ids=["new-out", "overwrite"])
def test_interrupted_align_write_leaves_nothing(models, tmp_path, monkeypatch, error, code, phrase, overwrite):
    out = tmp_path / "aligned"
    if overwrite:
        out.mkdir()
        (out / "keep.txt").write_text("an earlier result\n")
    before = _snapshot(models["a"].parent, tmp_path)
    fault = Interrupt(monkeypatch, tmp_path, error)
    args = ["align", models["a"], models["b"], "--out", out, *FAST_ALIGN] + (["--overwrite"] if overwrite else [])
    result = _invoke(args)
    assert fault.hits, "the writer was never reached"  # the fault fired inside the temporary directory
    assert fault.hits[0].parent != out and fault.hits[0].parent.name.startswith(f".{out.name}.")
    assert result.exit_code == code and "Traceback" not in result.output, result.output
    assert _error_lines(result.output)[-1].endswith(phrase) or phrase in _error_lines(result.output)[-1]
    assert _snapshot(models["a"].parent, tmp_path) == before  # no new out, old out intact, no temp siblings


def test_interrupted_barrier_json_leaves_nothing(models, tmp_path, monkeypatch):
    target = tmp_path / "b.json"
    before = _snapshot(models["a"].parent, tmp_path)
    fault = Interrupt(monkeypatch, tmp_path, _disk_full)
    result = _invoke(["barrier", models["a"], models["b"], "--points", "2", "--max-batches", "1", "--batch-size",
                      "2", "--no-progress", "--json", target])
    assert fault.hits and fault.hits[0] != target
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert _error_lines(result.output)[-1].startswith("Error: ") and "No space left" in result.output
    assert _snapshot(models["a"].parent, tmp_path) == before


# ------------------------------------------------------------------------------------------------ bugs

def test_a_bug_is_one_line_and_shows_its_traceback_with_glmc_debug(models, tmp_path, monkeypatch):
    import glmc.api.functions

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(glmc.api.functions, "match", broken)  # what glmc.align calls (glmc.matching.align)
    args = ["align", models["a"], models["b"], "--out", tmp_path / "out"]
    monkeypatch.delenv("GLMC_DEBUG", raising=False)
    result = _invoke(args)
    assert result.exit_code == 70 and "Traceback" not in result.output
    (line,) = _error_lines(result.output)
    assert line.startswith("Error: internal error") and "ZeroDivisionError: a bug" in line and "GLMC_DEBUG=1" in line
    debug = _invoke(args, env={"GLMC_DEBUG": "1"})
    assert isinstance(debug.exception, ZeroDivisionError)  # raised through: Python prints the traceback
    assert not (tmp_path / "out").exists()


def test_bias_free_vits_align(models, tmp_path):
    """Was `KeyError: 'blocks.0.attn.q.b'` in weight matching (issue #16)."""
    out = tmp_path / "out"
    result = _invoke(["align", models["nobias_a"], models["nobias_b"], "--out", out, *FAST_ALIGN])
    assert result.exit_code == 0, result.output
    assert (out / "model.safetensors").is_file() and (out / "align.json").is_file()


# ------------------------------------------------------------------------------------------------ real processes

@pytest.mark.parametrize("args,code,phrase", [
    (["verify", "{truncated}"], 1, "is truncated or corrupt"),
    (["align", "{a}", "{b}", "--out", "{out}", "--iterations", "0"], 2, "'--iterations': 0 is not in the range"),
], ids=["truncated", "iterations-0"])
def test_real_process_stderr_and_exit_code(models, tmp_path, args, code, phrase):
    paths = {**{k: str(v) for k, v in models.items()}, "out": str(tmp_path / "out")}
    env = {k: v for k, v in os.environ.items() if k != "GLMC_DEBUG"}
    before = _snapshot(models["a"].parent, tmp_path)
    proc = subprocess.run([str(GLMC), *[a.format(**paths) for a in args]], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == code, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    lines = _error_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("Error: ") and phrase in lines[0], proc.stderr
    assert _snapshot(models["a"].parent, tmp_path) == before


# ------------------------------------------------------------------------------------------------ merge recipes

RECIPES = [
    ("recipe-unknown-key", "models: [{a}, {b}]\nmodle: weight\n", ERROR, "unknown key 'modle'"),
    ("recipe-one-model", "models: [{a}]\n", ERROR, "'models' must be a list of at least two"),
    ("recipe-missing-model", "models: [{a}, {root}/nope]\n", ERROR, "nope is not a directory"),
    ("recipe-bad-method", "models: [{a}, {b}]\nmethod: average\n", ERROR, "method must be one of weight, learned"),
    ("recipe-weights-sum", "models: [{a}, {b}]\nweights: [0.5, 0.6]\n", ERROR, "'weights' must sum to 1"),
    ("recipe-weights-count", "models: [{a}, {b}]\nweights: [1.0]\n", ERROR, "'weights' must be 2 non-negative"),
    ("recipe-unknown-option", "models: [{a}, {b}]\noptions: {{round: 2}}\n", ERROR, "unknown options key 'round'"),
    ("recipe-option-type", "models: [{a}, {b}]\noptions: {{steps: many}}\n", ERROR, "options.steps must be an int"),
    ("recipe-option-negative", "models: [{a}, {b}]\noptions: {{lr: -1}}\n", ERROR, "options.lr must be positive"),
    ("recipe-not-yaml", "models: [{a}, {b}\n", ERROR, "is not valid YAML"),
    ("recipe-not-a-mapping", "- {a}\n- {b}\n", ERROR, "a recipe is a mapping"),
    ("recipe-no-output", "models: [{a}, {b}]\n", USAGE, "has no 'output'"),
    ("recipe-and-models", None, USAGE, "with --config, give models in the recipe"),
    ("recipe-and-flags", None, USAGE, "with --config, give --rounds in the recipe"),
]


@pytest.mark.parametrize("text,code,phrase", [pytest.param(t, c, p, id=i) for i, t, c, p in RECIPES])
def test_bad_recipe_is_one_line_and_touches_nothing(models, tmp_path, monkeypatch, request, text, code, phrase):
    monkeypatch.delenv("GLMC_DEBUG", raising=False)
    paths = {k: str(v) for k, v in models.items()} | {"root": str(models["a"].parent)}
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text((text or "models: [{a}, {b}]\noutput: out\n").format(**paths))
    args = ["merge", "--config", str(recipe)]
    if request.node.callspec.id == "recipe-and-models":
        args += [paths["a"], paths["b"]]
    if request.node.callspec.id == "recipe-and-flags":
        args += ["--rounds", "2"]
    before = _snapshot(models["a"].parent, tmp_path)
    result = _invoke(args)
    assert _snapshot(models["a"].parent, tmp_path) == before
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == code and "Traceback" not in result.output, result.output
    lines = _error_lines(result.output)
    assert len(lines) == 1 and phrase in lines[0], result.output
