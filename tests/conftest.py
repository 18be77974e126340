"""Shared fixtures and helpers of every test layer (tests/unit, tests/conformance, tests/e2e, tests/meta; see
docs/getting-started.md): the in-process CLI (`run_cli`), the session fixtures that train models with `glmc train`
(a test using one is marked slow), a Hugging Face cache layout, text files. Model factories live in factories.py."""

import logging
import shutil
from pathlib import Path

import pytest

from factories import tiny_gpt2  # noqa: F401  (re-exported: `from conftest import tiny_gpt2` keeps working)

# transformers warns that GPT-2's default bos/eos ids lie outside tiny test vocabularies; harmless here.
logging.getLogger("transformers").setLevel(logging.ERROR)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
TINY_SHAKESPEARE = SHARED / "data" / "tinyshakespeare.txt"
needs_tiny_shakespeare = pytest.mark.skipif(not TINY_SHAKESPEARE.is_file(),
                                            reason="needs ../shared/data/tinyshakespeare.txt (its exact counts)")
_CORPUS = {}


def text_corpus() -> Path:
    """A real English text file for text:PATH tests: the standard Tiny Shakespeare from ../shared where it is,
    else the first 1.1 M characters of the built-in Shakespeare package written to a temporary file."""
    if TINY_SHAKESPEARE.is_file():
        return TINY_SHAKESPEARE
    if "path" not in _CORPUS:
        import tempfile

        from glmc.data.text import read_shakespeare

        path = Path(tempfile.mkdtemp(prefix="glmc-corpus-")) / "shakespeare.txt"
        text = read_shakespeare()[:1_100_000]
        path.write_text(text[: text.rindex("\n") + 1], encoding="utf-8")
        _CORPUS["path"] = path
    return _CORPUS["path"]


MLM_TEXT = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in "
            "want of a wife.\nHowever little known the feelings or views of such a man may be on his first entering a "
            "neighbourhood, this truth is so well fixed in the minds of the surrounding families.\n") * 40


@pytest.fixture(scope="session")
def mlm_text_file(tmp_path_factory):
    """A small English text file for the masked-LM tests (tokenizers are trained on it)."""
    path = tmp_path_factory.mktemp("mlm") / "austen.txt"
    path.write_text(MLM_TEXT)
    return path


# fixtures that train models with `glmc train`: every test using one carries the slow marker
TRAINING_FIXTURES = {"gpt2_pair", "vit_models", "seed_runs"}


def pytest_collection_modifyitems(items):
    for item in items:
        if TRAINING_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def run_cli(*args):
    """Runs the real `glmc` CLI in-process; fails the test with its output if it exits non-zero."""
    from click.testing import CliRunner

    from glmc.cli import main

    # GLMC_DEBUG: a bug inside a command surfaces as its traceback, not the CLI's one-line report
    result = CliRunner(env={"GLMC_DEBUG": "1"}).invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


TINY_GPT2 = ["--layers", 2, "--width", 48, "--heads", 4, "--mlp", 192, "--context", 64, "--steps", 150,
             "--batch-size", 32, "--eval-every", 75, "--quiet"]


@pytest.fixture(scope="session")
def gpt2_pair(tmp_path_factory):
    """Two GPT-2s trained by `glmc train` on the built-in Shakespeare text, seeds 0 and 1 (tiny budget)."""
    root = tmp_path_factory.mktemp("gpt2-pair")
    for seed in (0, 1):
        run_cli("train", "gpt2", "--data", "shakespeare", "--seed", seed, "--out", root / f"s{seed}", *TINY_GPT2)
    return root / "s0", root / "s1"


TINY_VIT = ["--layers", 2, "--heads", 4, "--mlp", 128, "--patch", 4, "--steps", 120, "--batch-size", 64,
            "--eval-every", 60, "--lr", 3e-3, "--quiet"]


@pytest.fixture(scope="session")
def vit_models(tmp_path_factory):
    """HF ViTs trained by `glmc train` on scikit-learn digits: three of width 64 (seeds 0-2), one of width 32."""
    root = tmp_path_factory.mktemp("vit-digits")
    out = {}
    for name, seed, width in (("w64s0", 0, 64), ("w64s1", 1, 64), ("w64s2", 2, 64), ("w32s3", 3, 32)):
        run_cli("train", "vit", "--data", "digits", "--seed", seed, "--width", width, "--out", root / name, *TINY_VIT)
        out[name] = root / name
    return out


SAVE_EVERY_RUN = ["--layers", 2, "--width", 32, "--heads", 4, "--mlp", 64, "--context", 32, "--steps", 6,
                  "--eval-every", 3, "--batch-size", 8, "--save-every", 3, "--quiet"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny GPT-2 runs of `glmc train --save-every 3` (6 steps, a few seconds each; one pair per module)."""
    root = tmp_path_factory.mktemp("runs")
    for seed in (0, 1):
        run_cli("train", "gpt2", "--data", "shakespeare", "--seed", seed, "--out", root / f"s{seed}",
                *SAVE_EVERY_RUN)
    return root / "s0", root / "s1"


def make_cache(root: Path, repo: str, revisions: dict) -> Path:
    """huggingface_hub's cache layout for `repo`: blobs/<sha256>, snapshots/<commit>/<file> symlinks into blobs/,
    refs/<name> holding the commit; one snapshot per revision name -> source directory. Returns the cache root."""
    import hashlib
    import os

    folder = root / f"models--{repo.replace('/', '--')}"
    (folder / "blobs").mkdir(parents=True, exist_ok=True)
    for name, src in revisions.items():
        commit = hashlib.sha1(name.encode()).hexdigest()
        snap = folder / "snapshots" / commit
        snap.mkdir(parents=True)
        for f in sorted(Path(src).iterdir()):
            blob = folder / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
            shutil.copyfile(f, blob)
            (snap / f.name).symlink_to(os.path.relpath(blob, snap))
        (folder / "refs" / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / "refs" / name).write_text(commit)
    return root
