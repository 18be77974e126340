"""Every data source and tokenizer of glmc.data, on real files (synthetic ones only for user formats)."""

import io
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

import glmc.data as D
from conftest import TINY_SHAKESPEARE, needs_tiny_shakespeare, text_corpus
from glmc.data.images import FASHION_DIRS
from glmc.data.mnist_pickle import ArrayOnlyUnpickler
from glmc.data.text import safe_cut, split_text
from glmc.data.tokenizer import build_tokenizer, encode

TINY = text_corpus()
TINY_SPEC = f"text:{TINY}"


def covered_tokens(ds, split, batch_size=16):
    """Concatenation of all targets of the ordered batches: must be the split's stream minus its first token."""
    return torch.cat([b["targets"].reshape(-1) for b in ds.batches(split, batch_size)])


# ------------------------------------------------------------------------------------------------- text

def test_shakespeare_char():
    ds = D.load("shakespeare")
    assert ds.task == "lm" and ds.spec["tokenizer"] == "char" and ds.vocab_size < 120
    n = ds.spec["n_tokens"]
    assert n["train"] > 4_000_000 and abs(n["val"] / sum(n.values()) - 0.05) < 0.001
    b = next(ds.batches("train", 4, seed=1))
    assert b["input_ids"].shape == (4, 128) and torch.equal(b["input_ids"][:, 1:], b["targets"][:, :-1])
    assert torch.equal(covered_tokens(ds, "test", 64), ds.tokens["test"][1:])
    assert 3.0 < ds.unigram_entropy("test") < 3.6


def test_python_stdlib_is_a_code_corpus_every_machine_has():
    import sysconfig

    from glmc.data.text import STDLIB_CHARS, read_python_stdlib

    text = read_python_stdlib()
    assert len(text) == STDLIB_CHARS and text.startswith("# file: ") and "\ndef " in text
    first = text.split("\n", 1)[0][len("# file: "):]
    assert first == min(p.name for p in Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    ds = D.load("python-stdlib", tokenizer="bpe:300", context=32)
    assert ds.task == "lm" and ds.vocab_size == 300 and ds.spec["source"] == "python-stdlib"
    assert torch.equal(covered_tokens(ds, "val"), ds.tokens["val"][1:])


@needs_tiny_shakespeare
def test_text_file_split_is_contiguous_and_exact():
    text = TINY_SHAKESPEARE.read_text(encoding="utf-8")
    pieces = split_text(text)
    assert "".join(pieces[k] for k in ("train", "val", "test")) == text
    assert all(p.endswith("\n") and not p.endswith("\n\n") for p in (pieces["train"], pieces["val"]))
    ds = D.load(f"text:{TINY_SHAKESPEARE}", context=32)
    assert ds.spec["n_chars"] == 1_115_394 and ds.spec["source"] == f"text:{TINY_SHAKESPEARE.resolve()}"
    assert torch.equal(covered_tokens(ds, "val"), ds.tokens["val"][1:])


@needs_tiny_shakespeare
def test_gpt2_tokenizer_pieces_tokenize_like_the_whole():
    ds = D.load(f"text:{TINY_SHAKESPEARE}", tokenizer="gpt2")
    assert ds.vocab_size == 50257
    assert sum(ds.spec["n_tokens"].values()) == 338_025  # the well-known GPT-2 token count of Tiny Shakespeare


def test_safe_cut_only_after_a_lone_newline():
    text = "a\n  b\nc\n\nd\ne"
    assert safe_cut(text, 2) == 6 and text[6] == "c"
    assert safe_cut(text, 7) == 11 and text[11] == "e"  # not inside "\n\n"
    assert safe_cut(text, 12) == len(text)


@pytest.mark.parametrize("kind", ["char", "bpe:300", "gpt2"])
def test_tokenizer_round_trip_through_autotokenizer(kind, tmp_path):
    train = TINY.read_text(encoding="utf-8")[:100_000]
    tok = build_tokenizer(kind, train)
    tok.save_pretrained(str(tmp_path))
    again = AutoTokenizer.from_pretrained(str(tmp_path))
    sample = "First Citizen:\nBefore we proceed any further, hear me speak.\n\n  All: Speak, speak!"
    ids = again(sample)["input_ids"]
    assert ids == tok(sample)["input_ids"] == encode(tok, sample).tolist()
    assert again.decode(ids) == sample
    assert len(again) == len(tok) and (kind != "bpe:300" or len(tok) == 300)


def test_char_tokenizer_unknown_characters_map_to_unk():
    tok = build_tokenizer("char", "abc\n")
    ids = encode(tok, "abz\n")
    assert ids.tolist() == tok("abz\n")["input_ids"] and ids[2] == tok.get_vocab()["[UNK]"]


def test_bpe_training_is_deterministic():
    train = TINY.read_text(encoding="utf-8")[:50_000]
    assert build_tokenizer("bpe:400", train).get_vocab() == build_tokenizer("bpe:400", train).get_vocab()


def test_spec_round_trip_rebuilds_the_same_batches():
    ds = D.load(TINY_SPEC, tokenizer="char", context=16)
    again = D.load(dict(ds.spec))
    a, b = next(ds.batches("train", 3, seed=5)), next(again.batches("train", 3, seed=5))
    assert torch.equal(a["input_ids"], b["input_ids"])
    with pytest.raises(ValueError, match="changed"):
        D.load(dict(ds.spec, text_sha256="0" * 64))


def test_bad_specs_are_named():
    with pytest.raises(ValueError, match="unknown data source"):
        D.parse_spec("imagenet")
    with pytest.raises(ValueError, match="N >= 257"):
        D.parse_spec("shakespeare", tokenizer="bpe:10")
    with pytest.raises(FileNotFoundError, match="not found"):
        D.load("text:/nonexistent/file.txt")


# ------------------------------------------------------------------------------------------------- images

def test_mnist():
    ds = D.load("mnist")
    assert ds.task == "cls" and ds.spec["val"] == "given" and ds.num_classes == 10
    assert [ds.num_examples(s) for s in ("train", "val", "test")] == [50_000, 10_000, 10_000]
    b = next(ds.batches("test", 8))
    assert b["pixel_values"].shape == (8, 1, 28, 28) and b["labels"].dtype == torch.int64
    assert abs(float(ds.normalize(ds.splits["train"][0][:2000]).mean())) < 0.05


def test_mnist_unpickler_refuses_anything_but_arrays():
    payload = pickle.dumps(print, protocol=2)  # a global that is not a numpy array constructor
    with pytest.raises(pickle.UnpicklingError, match="only numpy arrays"):
        ArrayOnlyUnpickler(io.BytesIO(payload)).load()
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert np.array_equal(ArrayOnlyUnpickler(io.BytesIO(pickle.dumps(arr, protocol=3))).load(), arr)


@pytest.mark.skipif(not Path(FASHION_DIRS[0]).is_dir(), reason="apt-get install dataset-fashion-mnist")
def test_fashion_mnist():
    ds = D.load("fashion-mnist")
    assert [ds.num_examples(s) for s in ("train", "val", "test")] == [55_000, 5_000, 10_000]
    assert ds.spec["val"] == "last:5000" and ds.class_names[9] == "Ankle boot"


def test_digits():
    ds = D.load("digits")
    assert sum(ds.spec["n_images"].values()) == 1797 and ds.image_size == 8 and ds.max_value == 16
    assert ds.spec["augment"] == "none"
    assert sum(b["labels"].numel() for b in ds.batches("val", 50)) == ds.num_examples("val")


def _write_cifar(path: Path, labels: list, label_bytes: int, seed: int):
    rng = np.random.default_rng(seed)
    rows = []
    for label in labels:
        head = [label // 5, label] if label_bytes == 2 else [label]
        rows.append(np.concatenate([np.array(head, np.uint8), rng.integers(0, 256, 3072, dtype=np.uint8)]))
    np.stack(rows).tofile(path)
    return np.stack(rows)


def test_cifar10_binary(tmp_path):
    root = tmp_path / "cifar-10-batches-bin"
    root.mkdir()
    first = _write_cifar(root / "data_batch_1.bin", list(range(10)) * 2, 1, 0)
    _write_cifar(root / "data_batch_2.bin", list(range(10)), 1, 1)
    _write_cifar(root / "test_batch.bin", [3, 1, 4], 1, 2)
    (root / "batches.meta.txt").write_text("\n".join(f"class{i}" for i in range(10)) + "\n\n")
    ds = D.load(f"cifar10:{tmp_path}")
    assert ds.spec["augment"] == "crop-flip" and ds.class_names[3] == "class3"
    assert ds.spec["n_images"] == {"train": 27, "val": 3, "test": 3}
    x, y = ds.splits["train"]
    assert torch.equal(x[1], torch.from_numpy(first[1, 1:].reshape(3, 32, 32))) and int(y[1]) == 1
    b = next(ds.batches("train", 4, seed=0))
    assert b["pixel_values"].shape == (4, 3, 32, 32)
    plain = next(ds.batches("train", 4, seed=0, augment=False))["pixel_values"]
    assert not torch.equal(b["pixel_values"], plain)  # crop-flip did something


def test_cifar100_binary_fine_and_coarse(tmp_path):
    _write_cifar(tmp_path / "train.bin", list(range(0, 100, 7)), 2, 0)
    _write_cifar(tmp_path / "test.bin", [12, 99], 2, 1)
    fine = D.load(f"cifar100:{tmp_path}")
    coarse = D.load(f"cifar100:{tmp_path}", labels="coarse")
    assert fine.num_classes == 100 and coarse.num_classes == 20
    assert fine.splits["test"][1].tolist() == [12, 99] and coarse.splits["test"][1].tolist() == [2, 19]


def test_image_folder(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for _c, name in enumerate(["cat", "dog"]):
        (tmp_path / name).mkdir()
        for i in range(10):
            Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)).save(tmp_path / name / f"{i}.png")
    ds = D.load(f"folder:{tmp_path}")
    assert ds.class_names == ["cat", "dog"] and ds.channels == 3 and ds.image_size == 12
    assert ds.spec["n_images"] == {"train": 17, "val": 1, "test": 2}
    assert sorted(ds.splits["test"][1].tolist()) == [0, 1]  # every 10th image: one per class
    resized = D.load(f"folder:{tmp_path}", image_size=8)
    assert next(resized.batches("test", 2))["pixel_values"].shape == (2, 3, 8, 8)


def test_missing_image_sources_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="test_batch.bin"):
        D.load(f"cifar10:{tmp_path}")
    with pytest.raises(FileNotFoundError, match="no class sub-folders"):
        D.load(f"folder:{tmp_path}")
