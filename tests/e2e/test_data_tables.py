"""Data as tables (glmc/data/tables.py): JSON lines, Parquet, save_to_disk folders and the local `datasets` cache,
written here from real files, through the CLI, the API and a merge recipe; text tokenised with model A's
tokenizer, images through the model folder's preprocessor config; the split rule stated in every result."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import glmc
from conftest import run_cli
from factories import init_gpt2, init_vit


def _docs(n=120):
    """n short English documents: lines of the built-in Shakespeare text, whose characters the models know."""
    from glmc.data.text import read_shakespeare

    lines = [x.strip() for x in read_shakespeare()[:400_000].splitlines() if len(x.strip()) > 30]
    return [" ".join(lines[i * 3:(i + 1) * 3]) for i in range(n)]


@pytest.fixture(scope="module")
def lm_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("table-models")
    ds = glmc.data.load("shakespeare", tokenizer="char", context=32)
    out = []
    for seed in (0, 1):
        init_gpt2(ds.vocab_size, seed).save_pretrained(root / f"m{seed}")
        ds.tokenizer.save_pretrained(root / f"m{seed}")  # no glmc.json: the data must be given
        out.append(root / f"m{seed}")
    return out


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """The same documents as a JSON-lines file (one split), a Parquet folder (train and test) and a save_to_disk
    DatasetDict (train, validation, test)."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("tables")
    docs = _docs()
    with open(root / "docs.jsonl", "w") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"id": i, "body": d}) + "\n")
    (root / "pq").mkdir()
    pq.write_table(pa.table({"text": docs[:100]}), root / "pq" / "train.parquet")
    pq.write_table(pa.table({"text": docs[100:]}), root / "pq" / "test.parquet")
    parts = {"train": docs[:90], "validation": docs[90:105], "test": docs[105:]}
    datasets.DatasetDict({k: datasets.Dataset.from_dict({"text": v}) for k, v in parts.items()}).save_to_disk(
        root / "disk")
    return root, docs


@pytest.mark.parametrize("source,rule", [("jsonl:{root}/docs.jsonl:body", "90/5/5"),
                                         ("parquet:{root}/pq", "val-from-train"),
                                         ("hf-disk:{root}/disk", "own")], ids=["jsonl", "parquet", "hf-disk"])
def test_text_tables_through_the_cli_and_the_api(lm_pair, tables, tmp_path, source, rule):
    root, docs = tables
    spec = source.format(root=root)
    out = tmp_path / "b.json"
    run_cli("barrier", *lm_pair, "--data", spec, "--max-batches", 2, "--batch-size", 4, "--no-progress", "--json", out)
    result = json.loads(out.read_text())
    assert result["data"]["split_rule"] == rule and result["data"]["tokenizer"] == "char"
    ds = glmc.data.load(spec, use_tokenizer=lm_pair[0], context=32)
    assert ds.spec["split_rule"] == rule and ds.vocab_size == len(ds.tokenizer)
    assert f"splits: {rule}" in ds.describe()
    text = "".join(ds.tokenizer.decode(ds.tokens[k].tolist()) for k in ("train", "val", "test"))
    assert text.replace("\n", "") == "".join(docs)  # every document, once, in order
    if rule == "val-from-train":  # the last 5 % of train's 100 rows
        assert ds.tokenizer.decode(ds.tokens["val"].tolist()) == "\n".join(docs[95:100])
    if rule == "own":
        assert ds.tokenizer.decode(ds.tokens["test"].tolist()) == "\n".join(docs[105:])
    a, b = glmc.load_model(lm_pair[0]), glmc.load_model(lm_pair[1])
    curve = glmc.barrier(a, b, data=spec, max_batches=2, batch_size=4, progress=False)
    assert curve.loss == result["results"]["none"]["loss"]
    if rule == "own":
        run_cli("align", *lm_pair, "--out", tmp_path / "al", "--data", spec, "--iterations", 1, "--no-progress")
        assert json.loads((tmp_path / "al" / "align.json").read_text())["data"]["split_rule"] == "own"


def build_datasets_cache(cache: Path, name: str, files: dict) -> Path:
    """A data set `name` in the `datasets` cache, built offline from local JSON-lines files: the json builder
    prepares it, and its arrow files are filed under the name, as load_dataset leaves a downloaded data set."""
    import datasets

    build = cache / "_build"
    datasets.load_dataset("json", data_files={k: str(v) for k, v in files.items()}, cache_dir=str(build))
    built = next((build / "json").glob("*/*/*"))
    org, short = name.split("/")
    dst = cache / f"{org}___{short}" / "default" / built.parent.name / built.name
    dst.mkdir(parents=True)
    info = json.loads((built / "dataset_info.json").read_text())
    info.update(config_name="default", dataset_name=short, builder_name=short)
    (dst / "dataset_info.json").write_text(json.dumps(info))
    for f in built.glob("*.arrow"):
        shutil.copy(f, dst / f.name.replace("json-", f"{short}-"))
    shutil.rmtree(build)
    return cache


def test_a_data_set_in_the_local_datasets_cache(lm_pair, tables, tmp_path, monkeypatch):
    import datasets

    root, docs = tables
    files = {}
    for split, part in (("train", docs[:100]), ("test", docs[100:])):
        files[split] = tmp_path / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps({"text": d}) + "\n" for d in part))
    cache = build_datasets_cache(tmp_path / "ds-cache", "someone/tiny-text", files)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    ds = glmc.data.load("hf:someone/tiny-text", use_tokenizer=lm_pair[0], context=32)
    assert ds.spec["split_rule"] == "val-from-train"
    one = glmc.data.load("hf:someone/tiny-text:default:test", use_tokenizer=lm_pair[0], context=32)
    assert one.spec["split_rule"] == "90/5/5"
    out = run_cli("merge", *lm_pair, "--out", tmp_path / "m", "--iterations", 1, "--rounds", 1, "--data",
                  "hf:someone/tiny-text", "--max-batches", 1, "--batch-size", 4, "--no-progress")
    assert "merged:" in out
    assert json.loads((tmp_path / "m" / "merge.json").read_text())["data"]["split_rule"] == "val-from-train"
    with pytest.raises(glmc.errors.DataUnavailable, match="someone/other is not in the local datasets cache"):
        glmc.data.load("hf:someone/other", use_tokenizer=lm_pair[0])


def test_a_merge_recipe_names_a_table_relative_to_itself(lm_pair, tables, tmp_path):
    root, _ = tables
    shutil.copy(root / "docs.jsonl", tmp_path / "docs.jsonl")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"models: [{lm_pair[0]}, {lm_pair[1]}]\noptions: {{rounds: 1, iterations: 1}}\n"
                      "data: jsonl:docs.jsonl:body\nevaluation: {max_batches: 1, batch_size: 4}\noutput: merged\n")
    run_cli("merge", "--config", recipe, "--no-progress")
    report = json.loads((tmp_path / "merged" / "merge.json").read_text())
    assert report["data"]["source"] == f"jsonl:{tmp_path / 'docs.jsonl'}:body"
    assert report["data"]["split_rule"] == "90/5/5"


def _png(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def test_image_tables_use_the_model_folders_preprocessor(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from transformers import ViTImageProcessor

    rng = np.random.default_rng(0)
    labels = [i % 3 for i in range(60)]
    images = [_png((rng.random((12, 12)) * 80 + 60 * y).astype(np.uint8)) for y in labels]
    pq.write_table(pa.table({"img": [{"bytes": b, "path": None} for b in images], "y": labels}),
                   tmp_path / "digits.parquet")
    models = []
    for seed in (0, 1):
        path = tmp_path / f"vit{seed}"
        init_vit(seed).save_pretrained(path)
        ViTImageProcessor(size={"height": 8, "width": 8}, image_mean=[0.5, 0.4, 0.3],
                          image_std=[0.2, 0.2, 0.2]).save_pretrained(path)
        models.append(path)
    spec = f"parquet:{tmp_path / 'digits.parquet'}:image=img,label=y"
    ds = glmc.data.load(spec, use_preprocessor=models[0])
    assert ds.spec["split_rule"] == "90/5/5" and ds.spec["normalize"]["mean"] == [0.5, 0.4, 0.3]
    assert (ds.image_size, ds.channels, ds.num_classes) == (8, 3, 3)
    assert sum(ds.num_examples(k) for k in ("train", "val", "test")) == 60
    batch = next(ds.batches("test", 4))
    assert batch["pixel_values"].shape == (3, 3, 8, 8)
    out = tmp_path / "b.json"
    run_cli("barrier", *models, "--data", spec, "--no-progress", "--json", out, "--points", 3)
    result = json.loads(out.read_text())
    assert result["data"]["image_size"] == 8 and result["data"]["split_rule"] == "90/5/5"
    plain = glmc.data.load(spec)  # without a model folder: the data's own size and statistics
    assert plain.image_size == 12 and plain.channels == 1


def test_masked_lm_reads_text_tables(tmp_path):
    """The table specs serve every task: a masked-LM data set from JSON lines, with the split rule stated."""
    import json

    import glmc.data
    from glmc.data.text import read_shakespeare

    lines = [line for line in read_shakespeare()[:60_000].split("\n\n") if line.strip()]
    path = tmp_path / "plays.jsonl"
    path.write_text("".join(json.dumps({"text": line}) + "\n" for line in lines))
    ds = glmc.data.load({"task": "mlm", "source": f"jsonl:{path}:text", "style": "bert", "tokenizer": "wordpiece:200",
                         "context": 32})
    assert ds.task == "mlm" and ds.spec["split_rule"] == "90/5/5"
    batch = next(iter(ds.batches("test", 4)))
    assert batch["input_ids"].shape == (4, 32) and (batch["masked_targets"] != -100).any()
