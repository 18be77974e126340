"""Extending glmc from another package: tests/plugins/glmc-toy-plugin (a method, a model family, data sources and a
task, each a record behind an entry point) is installed with pip into a temporary folder, and glmc runs with it in
real processes: records discovered, the method through the API and the CLI, the family trained, verified, aligned
and merged and put through glmc's own conformance suite, models trained and evaluated on the data source and on the
task's generated data. A broken plugin is refused in one line naming its package."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
PLUGIN = TESTS / "plugins" / "glmc-toy-plugin"
GLMC = Path(sys.executable).with_name("glmc")


def _install(source: Path, tmp: Path) -> dict:
    """pip-install `source` (copied first: pip builds in the tree it is given) into `tmp`/site; the environment
    whose processes see it."""
    shutil.copytree(source, tmp / "src")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(tmp / "site"), str(tmp / "src")], check=True, capture_output=True)
    path = os.pathsep.join(p for p in (str(tmp / "site"), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "GLMC_DEBUG": ""}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return _install(PLUGIN, tmp_path_factory.mktemp("plugin"))


def _run(env, *args, check=True) -> subprocess.CompletedProcess:
    r = subprocess.run([str(a) for a in args], env=env, capture_output=True, text=True)
    assert not check or r.returncode == 0, r.stdout + r.stderr
    return r


def _python(env, code: str) -> str:
    return _run(env, sys.executable, "-c", textwrap.dedent(code)).stdout


def test_the_records_are_discovered_after_glmcs_own(env):
    from glmc.adapters import FAMILIES
    from glmc.data.sources import BUILTIN as BUILTIN_SOURCES
    from glmc.methods import names
    from glmc.tasks import BUILTIN as BUILTIN_TASKS

    found = json.loads(_python(env, """
        import json
        from glmc.adapters import families
        from glmc.data.sources import sources
        from glmc.methods import method, names
        from glmc.tasks import tasks
        print(json.dumps({"methods": names(), "families": list(families()), "sources": list(sources()),
                          "tasks": list(tasks()),
                          "stochastic": names(stochastic=True), "merges": names(merges=True),
                          "options": method("random-symmetry").options.__name__}))
    """))
    assert found["methods"] == [*names(), "random-symmetry"]  # glmc's own first, in their order
    assert found["families"] == [*FAMILIES, "ministral"]
    assert found["sources"] == [*(s.kind for s in BUILTIN_SOURCES), "docstrings", "repeats"]
    assert found["tasks"] == [*(t.name for t in BUILTIN_TASKS), "induction"]
    assert "random-symmetry" in found["stochastic"] and "random-symmetry" not in found["merges"]
    assert found["options"] == "RandomSymmetryOptions"
    help_text = _run(env, GLMC, "--help").stdout
    assert "Ministral" in " ".join(help_text.split())
    align_help = " ".join(_run(env, GLMC, "align", "--help").stdout.split())
    assert "a control: B moved by a random element of its declared groups" in align_help
    assert "|random-symmetry]" in align_help and "--seed INTEGER" in align_help
    assert "random-symmetry" not in " ".join(_run(env, GLMC, "merge", "--help").stdout.split())


def test_a_plugin_method_runs_through_the_api_and_the_cli(env, gpt2_pair, tmp_path):
    a, b = gpt2_pair
    report = json.loads(_python(env, f"""
        import json, torch, glmc
        a, b = glmc.load_model({str(a)!r}), glmc.load_model({str(b)!r})
        al = glmc.align(a, b, method="random-symmetry", seed=3)
        moved = max(float((p - q).abs().max()) for p, q in zip(al.model_b.parameters(), b.parameters()))
        print(json.dumps({{**{{k: al.report[k] for k in ("method", "seed", "max_dlogits_b")}}, "moved": moved,
                          "groups": sorted(al.transform.groups)}}))
    """))
    assert report["method"] == "random-symmetry" and report["seed"] == 3
    assert report["max_dlogits_b"] <= 1e-4 and report["moved"] > 1e-2  # B really moved, its function kept
    assert {"residual", "heads", "mlp"} <= set(report["groups"])
    refused = _python(env, """
        import glmc, transformers
        def gpt2(width):
            cfg = transformers.GPT2Config(vocab_size=30, n_positions=16, n_embd=width, n_layer=1, n_head=2)
            return transformers.GPT2LMHeadModel(cfg).eval()
        try:
            glmc.align(gpt2(32), gpt2(16), method="random-symmetry")
        except glmc.errors.IncompatibleModels as e:
            print(e)
    """)
    assert "method 'random-symmetry' aligns models of one width only" in refused  # by name, not a crash
    _run(env, GLMC, "align", a, b, "--method", "random-symmetry", "--seed", 5, "--out", tmp_path / "al")
    written = json.loads((tmp_path / "al" / "align.json").read_text())
    assert written["method"] == "random-symmetry" and written["seed"] == 5 and written["max_dlogits_b"] <= 1e-4
    _run(env, GLMC, "barrier", a, b, "--align", "weight,random-symmetry", "--seeds", "1,2", "--points", 3,
         "--max-batches", 2, "--no-progress", "--json", tmp_path / "b.json")
    res = json.loads((tmp_path / "b.json").read_text())["results"]
    assert [r["seed"] for r in res["random-symmetry"]["repeats"]] == [1, 2]  # a stochastic method, repeated
    # the control does not align: weight matching leaves a lower barrier than a random point of B's orbit
    assert res["weight"]["loss_barrier"] < res["random-symmetry"]["loss_barrier"]


def test_a_plugin_family_trains_verifies_aligns_and_merges(env, tmp_path):
    shape = ["--data", "shakespeare", "--layers", 1, "--width", 32, "--heads", 4, "--kv-heads", 2, "--head-dim", 8,
             "--mlp", 64, "--context", 32, "--steps", 30, "--batch-size", 16, "--eval-every", 30, "--eval-batches", 1,
             "--quiet"]
    for seed in (0, 1):
        _run(env, GLMC, "train", "ministral", "--seed", seed, "--out", tmp_path / f"m{seed}", *shape)
    assert "checks within 0.0001" in _run(env, GLMC, "verify", tmp_path / "m0").stdout.splitlines()[-1]
    _run(env, GLMC, "align", tmp_path / "m0", tmp_path / "m1", "--out", tmp_path / "al", "--no-progress")
    report = json.loads((tmp_path / "al" / "align.json").read_text())
    assert report["max_dlogits_b"] <= 1e-4 and report["distance_after"] < report["distance_before"]
    _run(env, GLMC, "merge", tmp_path / "m0", tmp_path / "m1", "--out", tmp_path / "merged", "--rounds", 1,
         "--no-eval", "--no-progress")
    assert max(json.loads((tmp_path / "merged" / "merge.json").read_text())["max_dlogits"]) <= 1e-4
    from transformers import AutoModelForCausalLM

    assert type(AutoModelForCausalLM.from_pretrained(tmp_path / "merged")).__name__ == "MinistralForCausalLM"


def test_models_train_and_are_evaluated_on_a_plugin_data_source(env, tmp_path):
    spec = json.loads(_python(env, """
        import json, glmc.data
        ds = glmc.data.load("docstrings", tokenizer="char", context=32)
        print(json.dumps({**ds.spec, "train_tokens": ds.num_tokens("train")}))
    """))
    assert spec["task"] == "lm" and spec["source"] == "docstrings" and spec["train_tokens"] > 100_000
    shape = ["--layers", 1, "--width", 32, "--heads", 2, "--context", 32, "--steps", 20, "--batch-size", 16,
             "--eval-every", 20, "--eval-batches", 1, "--quiet"]
    for seed in (0, 1):
        _run(env, GLMC, "train", "gpt2", "--data", "docstrings", "--seed", seed, "--out", tmp_path / f"d{seed}", *shape)
    record = json.loads((tmp_path / "d0" / "glmc.json").read_text())
    assert record["data"]["source"] == "docstrings" and record["data"]["text_sha256"] == spec["text_sha256"]
    # the data recorded beside the models is found again through the plugin
    _run(env, GLMC, "barrier", tmp_path / "d0", tmp_path / "d1", "--points", 2, "--max-batches", 1, "--no-progress",
         "--json", tmp_path / "b.json")
    result = json.loads((tmp_path / "b.json").read_text())
    assert result["data"]["source"] == "docstrings" and result["results"]["none"]["n_batches"] == 1
    r = _run({**env, "PYTHONPATH": ""}, GLMC, "barrier", tmp_path / "d0", tmp_path / "d1", check=False)
    assert r.returncode == 1 and "unknown data source 'docstrings'" in r.stderr  # without the plugin: one line


def test_models_learn_a_plugin_task_on_its_generated_data(env, tmp_path):
    ds = json.loads(_python(env, """
        import json, math, glmc.data
        ds = glmc.data.load("repeats:16", context=15, examples=64)
        batch = next(ds.batches("test", 4))
        print(json.dumps({**ds.spec, "unigram": ds.unigram_entropy(), "inputs": batch["input_ids"].tolist(),
                          "targets": batch["targets"].tolist()}))
    """))
    assert ds["task"] == "induction" and "tokenizer" not in ds and ds["unigram"] == pytest.approx(math.log(16))
    for inputs, targets in zip(ds["inputs"], ds["targets"], strict=True):
        assert inputs[8:] == inputs[:7] and targets[:7] == [-100] * 7 and targets[7:] == inputs[:8]  # the repeat
    shape = ["--layers", 1, "--width", 32, "--heads", 2, "--context", 15, "--steps", 20, "--batch-size", 16,
             "--eval-every", 20, "--eval-batches", 1, "--quiet"]
    for seed in (0, 1):  # a GPT-2 (a language model) learns the task: its models are language models
        _run(env, GLMC, "train", "gpt2", "--data", "repeats:16", "--seed", seed, "--out", tmp_path / f"i{seed}", *shape)
    record = json.loads((tmp_path / "i0" / "glmc.json").read_text())
    assert record["data"]["task"] == "induction" and "tokenizer" not in record
    assert record["baseline"]["unigram_test_loss"] == pytest.approx(math.log(16))
    assert "checks within 0.0001" in _run(env, GLMC, "verify", tmp_path / "i0").stdout.splitlines()[-1]
    _run(env, GLMC, "barrier", tmp_path / "i0", tmp_path / "i1", "--align", "none,weight", "--points", 3,
         "--no-progress", "--json", tmp_path / "b.json")
    result = json.loads((tmp_path / "b.json").read_text())
    assert result["data"]["task"] == "induction"
    for method in ("none", "weight"):  # scored on the repeats only: 8 predictions per test example
        curve = result["results"][method]
        assert all(math.isfinite(x) for x in curve["loss"]) and curve["n_predictions"] == 8 * (4096 // 8)
    # the task's data feed only models of its model task: an image classifier is refused in one line
    r = _run(env, GLMC, "train", "vit", "--data", "repeats:16", "--quiet", "--out", tmp_path / "v", check=False)
    assert r.returncode == 1 and len([x for x in r.stderr.splitlines() if x.strip()]) == 1, r.stderr
    r = _run({**env, "PYTHONPATH": ""}, GLMC, "barrier", tmp_path / "i0", tmp_path / "i1", check=False)
    assert r.returncode == 1 and "unknown task 'induction'" in r.stderr  # without the plugin: one line


def test_the_plugin_family_passes_glmcs_conformance_suite(env):
    paths = os.pathsep.join([env["PYTHONPATH"], str(TESTS / "conformance"), str(TESTS)])
    r = _run({**env, "PYTHONPATH": paths}, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             PLUGIN / "conformance_ministral.py", check=False)
    assert r.returncode == 0 and " passed" in r.stdout and "failed" not in r.stdout, r.stdout[-3000:]


def test_a_broken_plugin_is_refused_in_one_line_naming_its_package(tmp_path):
    source = tmp_path / "broken"
    source.mkdir()
    (source / "pyproject.toml").write_text(textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "glmc-broken-plugin"
        version = "0.0.1"
        [project.entry-points."glmc.methods"]
        weight = "glmc_broken_plugin:WEIGHT"
        [tool.setuptools]
        py-modules = ["glmc_broken_plugin"]
    """))
    # a record reusing the name of one of glmc's own methods
    (source / "glmc_broken_plugin.py").write_text(
        'from glmc.methods import Method\nWEIGHT = Method(name="weight", summary="mine")\n')
    env = _install(source, tmp_path / "installed")
    r = _run(env, GLMC, "barrier", "a", "b", "--align", "none", check=False)
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.strip()]
    assert r.returncode == 1 and len(lines) == 1, r.stdout + r.stderr
    assert "glmc-broken-plugin 0.0.1" in lines[0] and "already registered" in lines[0], lines[0]
